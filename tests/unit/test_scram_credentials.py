"""SCRAM credentials in the metadata log: the controller's validation (Kafka's ScramControlManager and its
tests), the keys it derives, the image, snapshots, restarts, and bootstrap.checkpoint."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

import pytest

from klamm.cli.main import main
from klamm.cli.tools.common import ToolError
from klamm.cli.tools.storage import scram_record
from klamm.controller.bootstrap import BOOTSTRAP_FILE, BootstrapError, read_bootstrap, write_bootstrap
from klamm.controller.controller import Controller, SnapshotPolicy
from klamm.controller.image import ImageBuilder, apply, empty_image
from klamm.controller.metadata_log import FileMetadataLog, InMemoryMetadataLog
from klamm.controller.records import MetadataRecord, decode_record, encode_record
from klamm.controller.scram import ScramDeletion, ScramUpsertion, decide_alter_user_scram_credentials
from klamm.controller.snapshot import image_records
from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl import ScramCredential, credential_from_salted_password

CLUSTER = "AAAAAAAAAAAAAAAAAAAAAA"
SHA256, SHA512, UNKNOWN = 1, 2, 0
SALTED = b"saltedPassword"  # Kafka's AlterUserScramCredentialsRequestTest uses these bytes
SALT = b"salt"


def controller() -> Controller:
    c = Controller(InMemoryMetadataLog(), 1, CLUSTER)
    c.load()
    return c


def upsert(name: str, mechanism: int = SHA256, iterations: int = 4096) -> ScramUpsertion:
    return ScramUpsertion(name, mechanism, iterations, SALT, SALTED)


def outcome(results) -> dict[str, tuple[ErrorCode, str | None]]:
    return {r.user: (r.error, r.message) for r in results}


DUPLICATE = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")


# ------------------------------------------------------------------ validation


def test_alter_nothing_writes_nothing() -> None:
    c = controller()
    end = c.log.end_offset
    assert c.alter_user_scram_credentials([], []) == []
    assert c.log.end_offset == end


def test_upsert_then_delete() -> None:
    c = controller()
    results = c.alter_user_scram_credentials([], [upsert("user1"), upsert("user2", SHA512, 8192)])
    assert outcome(results) == {"user1": (ErrorCode.none, None), "user2": (ErrorCode.none, None)}
    assert c.image.scram_credential("user1", "SCRAM-SHA-256").iterations == 4096
    assert c.image.scram_credential("user2", "SCRAM-SHA-512").iterations == 8192
    assert c.image.scram_credential("user2", "SCRAM-SHA-256") is None
    assert c.image.scram_users() == {"user1": {"SCRAM-SHA-256": 4096}, "user2": {"SCRAM-SHA-512": 8192}}
    # One atomic batch for the whole request.
    assert [len(batch) for batch in c.log.batches][-1] == 2

    results = c.alter_user_scram_credentials([ScramDeletion("user1", SHA256)], [upsert("user3", SHA512)])
    assert outcome(results) == {"user1": (ErrorCode.none, None), "user3": (ErrorCode.none, None)}
    assert c.image.scram_users() == {"user2": {"SCRAM-SHA-512": 8192}, "user3": {"SCRAM-SHA-512": 4096}}


def test_a_user_altered_twice_in_one_request_is_a_duplicate() -> None:
    """AlterUserScramCredentialsRequestTest.testAlterSameThingTwice: nothing is written for such a user."""
    c = controller()
    c.alter_user_scram_credentials([], [upsert("user1"), upsert("user2")])
    results = c.alter_user_scram_credentials([ScramDeletion("user1", SHA256), ScramDeletion("user1", SHA256)],
                                             [upsert("user2"), upsert("user2")])
    assert outcome(results) == {"user1": DUPLICATE, "user2": DUPLICATE}
    results = c.alter_user_scram_credentials([ScramDeletion("user1", SHA256), ScramDeletion("user2", SHA256)],
                                             [upsert("user1"), upsert("user2")])
    assert outcome(results) == {"user1": DUPLICATE, "user2": DUPLICATE}
    # Two mechanisms of one user are two alterations of that user, as in Kafka.
    results = c.alter_user_scram_credentials([], [upsert("user3", SHA256), upsert("user3", SHA512)])
    assert outcome(results) == {"user3": DUPLICATE}
    assert c.image.scram_users() == {"user1": {"SCRAM-SHA-256": 4096}, "user2": {"SCRAM-SHA-256": 4096}}


def test_a_third_mention_after_a_failure_is_ignored() -> None:
    results, records = decide_alter_user_scram_credentials(
        controller().image, [], [upsert("u"), upsert("u"), upsert("u"), upsert("v")])
    assert [(r.user, r.error) for r in results] == [("v", ErrorCode.none), ("u", ErrorCode.duplicate_resource)]
    assert [r.data["name"] for r in records] == ["v"]


def test_empty_user_name() -> None:
    """testAlterEmptyUser: one result, UNACCEPTABLE_CREDENTIAL, whatever else names the empty user."""
    c = controller()
    empty = (ErrorCode.unacceptable_credential, "Username must not be empty")
    assert outcome(c.alter_user_scram_credentials([ScramDeletion("", SHA256)], [])) == {"": empty}
    assert outcome(c.alter_user_scram_credentials([], [upsert("")])) == {"": empty}
    results = c.alter_user_scram_credentials([ScramDeletion("", SHA256), ScramDeletion("", SHA256)], [upsert("")])
    assert len(results) == 1 and outcome(results) == {"": empty}


def test_unknown_mechanisms() -> None:
    """testAlterUnknownMechanism: five users, each UNSUPPORTED_SASL_MECHANISM once."""
    c = controller()
    deletions = [ScramDeletion("user1", UNKNOWN), ScramDeletion("user1", SHA256), ScramDeletion("user2", 10)]
    upsertions = [upsert("user4", UNKNOWN, 8192), upsert("user4", SHA256, 8192), upsert("user5", 10, 8192),
                  upsert("user6", UNKNOWN, 8192)]
    results = c.alter_user_scram_credentials(deletions, upsertions)
    assert len(results) == 5
    assert set(outcome(results).values()) == {(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")}
    assert c.image.scram_users() == {}


@pytest.mark.parametrize(("iterations", "message"), [(1, "Too few iterations"), (4095, "Too few iterations"),
                                                     (16385, "Too many iterations"),
                                                     (2**31 - 1, "Too many iterations")])
def test_iterations_out_of_range(iterations: int, message: str) -> None:
    results = controller().alter_user_scram_credentials([], [upsert("user1", SHA256, iterations)])
    assert outcome(results) == {"user1": (ErrorCode.unacceptable_credential, message)}


def test_iterations_at_the_bounds_are_accepted() -> None:
    results = controller().alter_user_scram_credentials([], [upsert("a", SHA256, 4096), upsert("b", SHA512, 16384)])
    assert {r.error for r in results} == {ErrorCode.none}


def test_deleting_a_missing_credential() -> None:
    c = controller()
    c.alter_user_scram_credentials([], [upsert("user1", SHA512)])
    results = c.alter_user_scram_credentials([ScramDeletion("user1", SHA256), ScramDeletion("nobody", SHA512)], [])
    missing = (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
    assert outcome(results) == {"user1": missing, "nobody": missing}


def test_metadata_version_below_3_5_iv2() -> None:
    """testMetadataVersionTooLow: metadata.version 3.4-IV0 (level 8) has no SCRAM."""
    image = apply(empty_image(CLUSTER, 1), MetadataRecord("FeatureLevelRecord",
                                                          {"name": "metadata.version", "feature_level": 8}))
    results, records = decide_alter_user_scram_credentials(image, [ScramDeletion("a", SHA256)], [upsert("b")])
    unsupported = (ErrorCode.unsupported_version, "The current metadata.version does not support SCRAM")
    assert outcome(results) == {"a": unsupported, "b": unsupported} and records == []


# ------------------------------------------------------------------ keys


def test_the_stored_and_server_keys_verify_rfc7677s_exchange() -> None:
    """RFC 7677's SCRAM-SHA-256 example: a server holding only our keys accepts the client's proof and answers
    the server signature the RFC shows."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    credential = credential_from_salted_password("SCRAM-SHA-256", salted, salt, 4096)
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth_message = (f"n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
                    f"c=biws,r={nonce}").encode()
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client_signature = hmac.new(credential.stored_key, auth_message, "sha256").digest()
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
    assert hashlib.sha256(client_key).digest() == credential.stored_key
    server_signature = hmac.new(credential.server_key, auth_message, "sha256").digest()
    assert base64.b64encode(server_signature) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_upsertion_stores_keys_never_the_salted_password() -> None:
    c = controller()
    c.alter_user_scram_credentials([], [upsert("user1", SHA512, 8192)])
    credential = c.image.scram_credential("user1", "SCRAM-SHA-512")
    assert credential == credential_from_salted_password("SCRAM-SHA-512", SALTED, SALT, 8192)
    assert len(credential.stored_key) == len(credential.server_key) == 64
    assert all(SALTED not in value for batch in c.log.batches for _, value in batch)


# ------------------------------------------------------------------ image, snapshots, restart


def test_records_replay_into_the_image() -> None:
    image = empty_image(CLUSTER, 1)
    record = MetadataRecord("UserScramCredentialRecord", {"name": "alice", "mechanism": SHA256, "salt": b"s",
                                                          "stored_key": b"k1", "server_key": b"k2",
                                                          "iterations": 4096})
    image = apply(image, decode_record(encode_record(record)))
    assert image.scram_credential("alice", "SCRAM-SHA-256") == ScramCredential(b"s", b"k1", b"k2", 4096)
    removal = MetadataRecord("RemoveUserScramCredentialRecord", {"name": "alice", "mechanism": SHA256})
    assert decode_record(encode_record(removal)).version == 0
    image = apply(image, decode_record(encode_record(removal)))
    assert image.scram_credential("alice", "SCRAM-SHA-256") is None and image.scram_credentials == {}
    assert apply(image, removal).scram_credentials == {}  # removing what is not there changes nothing


def test_snapshot_records_rebuild_the_credentials() -> None:
    c = controller()
    c.alter_user_scram_credentials([], [upsert("bob", SHA512), upsert("alice", SHA256, 8192)])
    c.alter_user_scram_credentials([], [upsert("alice", SHA512)])
    builder = ImageBuilder(empty_image(CLUSTER, 1))
    records = list(image_records(c.image))
    for record in records:
        builder.apply(decode_record(encode_record(record)))
    assert builder.build().scram_credentials == c.image.scram_credentials
    scram = [(r.data["name"], r.data["mechanism"]) for r in records if r.type == "UserScramCredentialRecord"]
    assert scram == [("alice", SHA256), ("alice", SHA512), ("bob", SHA512)]


@pytest.mark.parametrize("snapshot", [False, True], ids=["log", "snapshot"])
def test_credentials_survive_a_restart(tmp_path: Path, snapshot: bool) -> None:
    policy = SnapshotPolicy(max_bytes_between=1 << 62, max_interval_ms=0, retention_bytes=-1, retention_ms=-1)
    c = Controller(FileMetadataLog.open(tmp_path), 1, CLUSTER, snapshots=policy)
    c.load()
    c.alter_user_scram_credentials([], [upsert("alice", SHA256, 8192), upsert("bob", SHA512)])
    c.alter_user_scram_credentials([ScramDeletion("bob", SHA512)], [upsert("carol", SHA512)])
    if snapshot:
        assert c.snapshot() is not None
    before = c.image.scram_credentials
    c.close()
    again = Controller(FileMetadataLog.open(tmp_path), 1, CLUSTER, snapshots=policy)
    again.load()
    assert again.image.scram_credentials == before
    assert set(again.image.scram_users()) == {"alice", "carol"}
    again.close()


# ------------------------------------------------------------------ bootstrap.checkpoint


def test_the_first_start_appends_the_bootstrap_records(tmp_path: Path) -> None:
    record = scram_record("SCRAM-SHA-256=[name=admin,password=admin-secret]")
    write_bootstrap(tmp_path, [MetadataRecord("FeatureLevelRecord", {"name": "metadata.version",
                                                                     "feature_level": 21}), record], 0)
    c = Controller(FileMetadataLog.open(tmp_path), 1, CLUSTER)
    c.load()
    assert c.image.features["metadata.version"] == 21
    credential = c.image.scram_credential("admin", "SCRAM-SHA-256")
    salted = hashlib.pbkdf2_hmac("sha256", b"admin-secret", credential.salt, 4096)
    assert credential == credential_from_salted_password("SCRAM-SHA-256", salted, credential.salt, 4096)
    c.close()
    # Read only into an empty log: a later change to the file changes nothing.
    write_bootstrap(tmp_path, [scram_record("SCRAM-SHA-512=[name=other,password=x]")], 0)
    again = Controller(FileMetadataLog.open(tmp_path), 1, CLUSTER)
    again.load()
    assert set(again.image.scram_users()) == {"admin"}
    again.close()


def test_a_bootstrap_without_metadata_version_gets_it(tmp_path: Path) -> None:
    write_bootstrap(tmp_path, [scram_record("SCRAM-SHA-512=[name=a,password=b]")], 0)
    c = Controller(FileMetadataLog.open(tmp_path), 1, CLUSTER)
    c.load()
    assert c.image.features["metadata.version"] == 21 and set(c.image.scram_users()) == {"a"}
    c.close()


def test_a_damaged_bootstrap_file_stops_the_start(tmp_path: Path) -> None:
    path = write_bootstrap(tmp_path, [scram_record("SCRAM-SHA-512=[name=a,password=b]")], 0)
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(BootstrapError):
        read_bootstrap(tmp_path)
    with pytest.raises(BootstrapError):
        Controller(FileMetadataLog.open(tmp_path), 1, CLUSTER).load()
    assert read_bootstrap(tmp_path / "nowhere") is None


# ------------------------------------------------------------------ klamm storage format --add-scram


def test_add_scram_arguments() -> None:
    record = scram_record('SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",saltedpassword="YCE="]')
    assert record.data["name"] == "alice" and record.data["mechanism"] == SHA512
    assert record.data["salt"] == base64.b64decode("N3E=") and record.data["iterations"] == 8192
    expected = credential_from_salted_password("SCRAM-SHA-512", base64.b64decode("YCE="), base64.b64decode("N3E="), 8192)
    assert (record.data["stored_key"], record.data["server_key"]) == (expected.stored_key, expected.server_key)
    with_salt = scram_record("SCRAM-SHA-256=[name=bob,salt=c2FsdA==,password=pw]")
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 4096)
    assert with_salt.data["stored_key"] == credential_from_salted_password("SCRAM-SHA-256", salted, b"salt", 4096).stored_key


@pytest.mark.parametrize(("argument", "message"), [
    ("SCRAM-SHA-256", "Failed to find equals sign in SCRAM argument 'SCRAM-SHA-256'"),
    ("SCRAM-SHA-1=[name=a,password=b]", "The add-scram mechanism SCRAM-SHA-1 is not supported."),
    ("SCRAM-SHA-256=name=a,password=b]", "Expected configuration string to start with ["),
    ("SCRAM-SHA-256=[name=a,password=b", "Expected configuration string to end with ]"),
    ("SCRAM-SHA-256=[password=b]", "You must supply 'name' to add-scram"),
    ("SCRAM-SHA-256=[name=a]", "You must supply one of 'password' or 'saltedpassword' to add-scram"),
    ("SCRAM-SHA-256=[name=a,saltedpassword=YCE=]", "You must supply 'salt' with 'saltedpassword' to add-scram"),
    ("SCRAM-SHA-256=[name=a,password=b,colour=red]", "Unknown SCRAM configurations: colour"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=x]", "Failed to parse iterations count: x"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=4000]",
     "The 'iterations' value must be >= 4096 for add-scram using SCRAM_SHA_256"),
    ("SCRAM-SHA-512=[name=a,password=b,iterations=16385]",
     "The 'iterations' value must be <= 16384 for add-scram using SCRAM_SHA_512"),
    ("SCRAM-SHA-256=[name=a,password=b,salt=!!]", "Failed to decode given salt: !!"),
    ("SCRAM-SHA-256=[name=a,password]", "No equals sign found in SCRAM component: password"),
])
def test_add_scram_errors(argument: str, message: str) -> None:
    with pytest.raises(ToolError) as caught:
        scram_record(argument)
    assert str(caught.value) == message


def test_format_with_add_scram_writes_the_bootstrap_file(tmp_path: Path, capsys) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    config = tmp_path / "server.properties"
    config.write_text(f"node.id=1\nlog.dirs={','.join(str(d) for d in dirs)}\n")
    assert main(["storage", "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", str(config),
                 "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
                 "-S", "SCRAM-SHA-512=[name=admin,iterations=8192,password=admin-secret]"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"Formatting metadata directory {dirs[0]} with metadata.version 3.9-IV0.")
    for directory in dirs:  # every directory formatted, as Kafka's Formatter writes it
        records = read_bootstrap(directory)
        assert [(r.type, r.data.get("name")) for r in records] == [
            ("FeatureLevelRecord", "metadata.version"), ("UserScramCredentialRecord", "admin"),
            ("UserScramCredentialRecord", "admin")]
        assert b"admin-secret" not in (directory / BOOTSTRAP_FILE).read_bytes()
    assert main(["storage", "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", str(config), "-g",
                 "-S", "SCRAM-SHA-256=[name=x]"]) == 1
    assert "You must supply one of 'password' or 'saltedpassword'" in capsys.readouterr().err


def test_format_without_add_scram_writes_no_bootstrap_file(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(f"node.id=1\nlog.dirs={tmp_path / 'a'}\n")
    assert main(["storage", "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", str(config)]) == 0
    assert not (tmp_path / "a" / BOOTSTRAP_FILE).exists()


# ------------------------------------------------------------------ klamm configs --entity-type users


def test_configs_tool_credential_strings() -> None:
    from klamm.cli.tools import scram_configs

    default = scram_configs.upsertion("alice", "SCRAM-SHA-512", "password=a,b=c")  # the rest is the password
    assert (default.scram_credential_info.iterations, default.password) == (4096, b"a,b=c")
    assert scram_configs.upsertion("alice", "SCRAM-SHA-256", "iterations=-1,password=p").scram_credential_info \
        .iterations == 4096
    assert scram_configs.upsertion("alice", "SCRAM-SHA-256", "iterations=8192,password=p").scram_credential_info \
        .iterations == 8192
    for credential, message in [("secret", "Invalid credential property SCRAM_SHA_256=secret"),
                                ("iterations=100,password=p",
                                 "Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-256"),
                                ("iterations=,password=p", 'For input string: ""'),
                                ("password=", "Empty key")]:
        with pytest.raises(ToolError) as caught:
            scram_configs.upsertion("alice", "SCRAM-SHA-256", credential)
        assert str(caught.value) == message
    with pytest.raises(ToolError, match="Unexpected config names: colour"):
        scram_configs.check_config_names({"colour": "red"}, [])
    with pytest.raises(ToolError, match="Quota configs are not SCRAM credentials: consumer_byte_rate"):
        scram_configs.check_config_names({}, ["consumer_byte_rate"])
