"""SASL server mechanisms (klamm.protocol.sasl): PLAIN, SCRAM-SHA-256/512 and the JAAS config parser.

SCRAM is checked against RFC 7677's example exchange and against a small client
written here from RFC 5802 (it derives its keys itself, so a round trip checks
the server's arithmetic rather than agreeing with it). Whatever bytes arrive, a
mechanism answers or raises SaslError, nothing else.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    SCRAM_MECHANISMS,
    JaasEntry,
    PlainServer,
    SaslError,
    ScramCredential,
    ScramServer,
    credential_from_salted_password,
    hash_of,
    parse_jaas_config,
    plain_users,
    plain_verifier,
    salted_password,
    scram_credential,
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def invalid_credentials(mechanism: str) -> str:
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


# ---------------------------------------------------------------------------------------------------------------
# A SCRAM client, from RFC 5802 section 3


def client_hash(mechanism: str) -> str:
    return {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]


def escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str, nonce: str = "fyko+d2lbbFgONRv9qkxdawL",
                 authzid: str = "", extensions: str = "") -> None:
        self.hash = client_hash(mechanism)
        self.password = password
        self.nonce = nonce
        self.gs2_header = f"n,{'a=' + escape_name(authzid) if authzid else ''},"
        self.first_bare = f"n={escape_name(username)},r={nonce}{extensions}"
        self.server_signature = b""

    def first(self) -> bytes:
        return (self.gs2_header + self.first_bare).encode()

    def final(self, server_first: bytes, nonce: str | None = None, binding: str | None = None) -> bytes:
        """The client-final message; `nonce` and `binding` tamper with it (the proof still matches them)."""
        attributes = dict(item.split("=", 1) for item in server_first.decode().split(","))
        assert attributes["r"].startswith(self.nonce)
        salt = base64.b64decode(attributes["s"])
        salted = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), salt, int(attributes["i"]))
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored_key = hashlib.new(self.hash, client_key).digest()
        if binding is None:
            binding = base64.b64encode(self.gs2_header.encode()).decode()
        without_proof = f"c={binding},r={nonce or attributes['r']}"
        auth_message = f"{self.first_bare},{server_first.decode()},{without_proof}".encode()
        client_signature = hmac.new(stored_key, auth_message, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature))
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self.server_signature = hmac.new(server_key, auth_message, self.hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check(self, server_final: bytes) -> None:
        assert server_final == b"v=" + base64.b64encode(self.server_signature)


def server_for(mechanism: str, users: dict[str, str], iterations: int = MIN_ITERATIONS) -> ScramServer:
    credentials = {name: scram_credential(mechanism, password, iterations=iterations)
                   for name, password in users.items()}
    return ScramServer(mechanism, credentials.get)


def fails(call: object, *args: object) -> SaslError:
    assert callable(call)
    with pytest.raises(SaslError) as caught:
        call(*args)
    return caught.value


# ---------------------------------------------------------------------------------------------------------------
# SCRAM


def test_rfc7677_example_exchange() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = scram_credential("SCRAM-SHA-256", "pencil", salt=salt, iterations=4096)
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get, nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")

    server_first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert not server.complete and server.principal is None

    server_final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                   b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.principal == "user"


scram_names = st.text(st.characters(min_codepoint=1, max_codepoint=0x7F), min_size=1, max_size=20)


@SETTINGS
@given(mechanism=st.sampled_from(sorted(SCRAM_MECHANISMS)),
       username=st.one_of(scram_names, st.sampled_from(["a,b", "a=b", "=2C", "=3D", ",=,", "=="])),
       password=st.text(max_size=30), with_authzid=st.booleans())
def test_round_trip(mechanism: str, username: str, password: str, with_authzid: bool) -> None:
    server = server_for(mechanism, {username: password, "other": "x"})
    client = ScramClient(mechanism, username, password, authzid=username if with_authzid else "")
    client.check(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.complete and server.principal == username


@pytest.mark.parametrize("mechanism", sorted(SCRAM_MECHANISMS))
def test_wrong_password_fails_with_kafkas_message(mechanism: str) -> None:
    server = server_for(mechanism, {"alice": "alice-secret"})
    client = ScramClient(mechanism, "alice", "wrong")
    client_final = client.final(server.evaluate(client.first()))
    error = fails(server.evaluate, client_final)
    assert error.code is ErrorCode.sasl_authentication_failed
    assert error.message == invalid_credentials(mechanism)
    assert "Invalid client credentials" in error.detail
    assert not server.complete and server.principal is None
    assert fails(server.evaluate, client_final).code is ErrorCode.illegal_sasl_state


def test_unknown_user_fails_at_client_first_like_a_wrong_password() -> None:
    server = server_for("SCRAM-SHA-256", {"alice": "alice-secret"})
    error = fails(server.evaluate, ScramClient("SCRAM-SHA-256", "mallory", "x").first())
    assert error.code is ErrorCode.sasl_authentication_failed
    assert error.message == invalid_credentials("SCRAM-SHA-256")  # nothing tells the client the user is unknown
    assert "mallory" in error.detail


def test_failing_credential_store_becomes_a_sasl_error() -> None:
    def lookup(username: str) -> ScramCredential | None:
        raise OSError("store unavailable")

    error = fails(ScramServer("SCRAM-SHA-512", lookup).evaluate, b"n,,n=alice,r=abc")
    assert error.message == invalid_credentials("SCRAM-SHA-512")
    assert "store unavailable" in error.detail


def test_tampered_nonce_fails() -> None:
    server = server_for("SCRAM-SHA-256", {"alice": "alice-secret"})
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    server_first = server.evaluate(client.first())
    full_nonce = server_first.decode().split(",")[0][2:]
    error = fails(server.evaluate, client.final(server_first, nonce=full_nonce + "x"))
    assert error.message == invalid_credentials("SCRAM-SHA-256")
    assert "nonce" in error.detail


@pytest.mark.parametrize("binding", ["eSws", "", "bixh", "bixhPWFsaWNlLA=="])  # y,, / empty / n,a / n,a=alice,
def test_channel_binding_must_repeat_the_gs2_header(binding: str) -> None:
    server = server_for("SCRAM-SHA-256", {"alice": "alice-secret"})
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    error = fails(server.evaluate, client.final(server.evaluate(client.first()), binding=binding))
    assert error.message == invalid_credentials("SCRAM-SHA-256")


def test_channel_binding_with_authzid() -> None:
    server = server_for("SCRAM-SHA-256", {"alice": "alice-secret"})
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret", authzid="alice")
    assert client.first().startswith(b"n,a=alice,n=alice,")
    client.check(server.evaluate(client.final(server.evaluate(client.first()))))  # c=bixhPWFsaWNlLA==
    assert server.principal == "alice"
    server = server_for("SCRAM-SHA-256", {"alice": "alice-secret"})
    error = fails(server.evaluate, client.final(server.evaluate(client.first()), binding="biws"))
    assert error.message == invalid_credentials("SCRAM-SHA-256")


def test_authzid_different_from_username_fails() -> None:
    server = server_for("SCRAM-SHA-256", {"alice": "alice-secret"})
    error = fails(server.evaluate, ScramClient("SCRAM-SHA-256", "alice", "alice-secret", authzid="admin").first())
    assert error.code is ErrorCode.sasl_authentication_failed
    assert error.message == ("Authentication failed: Client requested an authorization id that is different "
                             "from username")


@pytest.mark.parametrize("flag", [b"y", b"p=tls-unique", b"p=tls-server-end-point"])
def test_channel_binding_flags_are_refused(flag: bytes) -> None:
    server = server_for("SCRAM-SHA-256", {"alice": "alice-secret"})
    error = fails(server.evaluate, flag + b",,n=alice,r=abc")
    assert error.message == invalid_credentials("SCRAM-SHA-256")
    assert "channel binding" in error.detail


@pytest.mark.parametrize("value", ["true", "TRUE", "True"])
def test_delegation_token_authentication_is_not_supported(value: str) -> None:
    looked_up = []

    def lookup(username: str) -> ScramCredential | None:
        looked_up.append(username)
        return None

    server = ScramServer("SCRAM-SHA-256", lookup)
    error = fails(server.evaluate, f"n,,n=tokenid,r=abc,tokenauth={value}".encode())
    assert error.code is ErrorCode.sasl_authentication_failed
    assert error.message == "Authentication failed: delegation token authentication is not supported"
    assert looked_up == []  # a token id is not a user name


@pytest.mark.parametrize("extensions", [",tokenauth=false", ",foo=bar", ",foo=a=b,tokenauth=no"])
def test_other_extensions_are_ignored_but_signed(extensions: str) -> None:
    server = server_for("SCRAM-SHA-512", {"alice": "alice-secret"})
    client = ScramClient("SCRAM-SHA-512", "alice", "alice-secret", extensions=extensions)
    client.check(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.principal == "alice"


def test_too_few_iterations_fail() -> None:
    credential = credential_from_salted_password(
        "SCRAM-SHA-256", salted_password("SCRAM-SHA-256", "pw", b"salt", 4095), b"salt", 4095)
    server = ScramServer("SCRAM-SHA-256", {"alice": credential}.get)
    error = fails(server.evaluate, b"n,,n=alice,r=abc")
    assert error.message == invalid_credentials("SCRAM-SHA-256")
    assert "4095 is less than the minimum 4096" in error.detail


@pytest.mark.parametrize("message", [
    b"", b"n,,", b"n,,n=alice", b"n,,n=alice,r=", b"n,,r=abc,n=alice", b"n,,n=,r=abc", b"n,,n=a=b,r=abc",
    b"n,,n=a=2c,r=abc", b"n,,m=ext,n=alice,r=abc", b"n,a=,n=alice,r=abc", b"n,,n=alice,r=a b",
    b"n,,n=alice,r=abc,", b"n,,n=alice,r=abc,1=x", b"n,,n=alice,r=abc,k=", "n,,n=\u00e9,r=abc".encode(),
    b"n,,n=alice,r=\xff", b"x,,n=alice,r=abc", b"n,x,n=alice,r=abc",
])
def test_malformed_client_first(message: bytes) -> None:
    server = server_for("SCRAM-SHA-256", {"alice": "alice-secret", "a=b": "x", "\u00e9": "x"})
    error = fails(server.evaluate, message)
    assert error.code is ErrorCode.sasl_authentication_failed
    assert error.message == invalid_credentials("SCRAM-SHA-256")


@pytest.mark.parametrize("message", [
    b"", b"c=biws", b"c=biws,r=NONCE", b"c=biws,r=NONCE,p=", b"c=biws,r=NONCE,p=abc", b"c=biw,r=NONCE,p=AAAA",
    b"c=biws,r=NONCE,p=AAAA", b"r=NONCE,c=biws,p=AAAA", b"c=biws,r=NONCE,p=!!!!", b"c=biws,r=NONCE,p=AAAA,x=y",
])
def test_malformed_client_final(message: bytes) -> None:
    server = server_for("SCRAM-SHA-256", {"alice": "alice-secret"})
    server_first = server.evaluate(ScramClient("SCRAM-SHA-256", "alice", "alice-secret").first())
    nonce = server_first.split(b",")[0][2:]
    error = fails(server.evaluate, message.replace(b"NONCE", nonce))
    assert error.code is ErrorCode.sasl_authentication_failed
    assert error.message == invalid_credentials("SCRAM-SHA-256")


def mutated(message: bytes) -> st.SearchStrategy[bytes]:
    """`message` with a byte changed, a slice cut out, or bytes inserted."""
    positions = st.integers(0, len(message))
    return st.one_of(
        st.tuples(st.integers(0, len(message) - 1), st.integers(0, 255)).map(
            lambda c: message[:c[0]] + bytes([c[1]]) + message[c[0] + 1:]),
        st.tuples(positions, positions).map(lambda c: message[:min(c)] + message[max(c):]),
        st.tuples(positions, st.binary(min_size=1, max_size=4)).map(lambda c: message[:c[0]] + c[1] + message[c[0]:]),
    )


@SETTINGS
@given(st.one_of(st.binary(max_size=80), mutated(b"n,a=alice,n=alice,r=abc,tokenauth=false")))
def test_any_client_first_gives_server_first_or_sasl_error(message: bytes) -> None:
    server = server_for("SCRAM-SHA-256", {"alice": "alice-secret"})
    try:
        assert server.evaluate(message).startswith(b"r=")
    except SaslError as error:
        assert error.code is ErrorCode.sasl_authentication_failed


FIXED_CLIENT = ScramClient("SCRAM-SHA-256", "alice", "alice-secret", nonce="abc")
FIXED_SERVER_FIRST = (b"r=abcdef,s=" + base64.b64encode(b"salt") + b",i=4096")
FIXED_CLIENT_FINAL = FIXED_CLIENT.final(FIXED_SERVER_FIRST)


def same_final(message: bytes) -> bool:
    """Whether `message` is FIXED_CLIENT_FINAL, its proof maybe in another base64 spelling of the same bytes (the
    last digit's unused low bits set, which a decoder may take: RFC 4648 section 3.5)."""
    head, _, proof = message.rpartition(b",p=")
    fixed_head, _, fixed_proof = FIXED_CLIENT_FINAL.rpartition(b",p=")
    return head == fixed_head and base64.b64decode(proof, validate=True) == base64.b64decode(fixed_proof)


@SETTINGS
@given(st.one_of(st.binary(max_size=120), mutated(FIXED_CLIENT_FINAL)))
def test_any_client_final_gives_server_final_or_sasl_error(message: bytes) -> None:
    credential = scram_credential("SCRAM-SHA-256", "alice-secret", salt=b"salt")
    server = ScramServer("SCRAM-SHA-256", {"alice": credential}.get, nonce=lambda: "def")
    assert server.evaluate(FIXED_CLIENT.first()) == FIXED_SERVER_FIRST
    try:
        FIXED_CLIENT.check(server.evaluate(message))
        assert same_final(message)
    except SaslError as error:
        assert error.code is ErrorCode.sasl_authentication_failed
        assert not server.complete


def test_server_nonce_is_fresh_and_follows_the_client_nonce() -> None:
    nonces = set()
    for _ in range(3):
        server = server_for("SCRAM-SHA-256", {"alice": "alice-secret"})
        nonce = server.evaluate(b"n,,n=alice,r=abc").decode().split(",")[0][2:]
        assert nonce.startswith("abc") and len(nonce) > 20 and "," not in nonce
        nonces.add(nonce)
    assert len(nonces) == 3


def test_unknown_mechanism_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="SCRAM-SHA-1"):
        ScramServer("SCRAM-SHA-1", lambda name: None)


# ---------------------------------------------------------------------------------------------------------------
# SCRAM credentials


def hi(hash_name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi, spelled out: U1 = HMAC(password, salt + INT(1)), Ui = HMAC(password, Ui-1), XOR of all."""
    u = hmac.new(password, salt + b"\0\0\0\1", hash_name).digest()
    result = u
    for _ in range(iterations - 1):
        u = hmac.new(password, u, hash_name).digest()
        result = bytes(a ^ b for a, b in zip(result, u))
    return result


@pytest.mark.parametrize("mechanism", sorted(SCRAM_MECHANISMS))
def test_salted_password_is_hi(mechanism: str) -> None:
    assert hash_of(mechanism) == client_hash(mechanism)
    expected = hi(hash_of(mechanism), "p\u00e4ss".encode(), b"NaCl", 50)
    assert salted_password(mechanism, "p\u00e4ss", b"NaCl", 50) == expected


def test_credential_keys() -> None:
    salted = salted_password("SCRAM-SHA-512", "pw", b"salt", 4096)
    credential = credential_from_salted_password("SCRAM-SHA-512", salted, b"salt", 4096)
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    assert credential == ScramCredential(salt=b"salt", stored_key=hashlib.sha512(client_key).digest(),
                                         server_key=hmac.new(salted, b"Server Key", "sha512").digest(),
                                         iterations=4096)
    assert scram_credential("SCRAM-SHA-512", "pw", salt=b"salt") == credential


def test_scram_credential_salt_and_iterations() -> None:
    first = scram_credential("SCRAM-SHA-256", "pw")
    second = scram_credential("SCRAM-SHA-256", "pw")
    assert first.salt != second.salt and len(first.salt) >= 16
    assert first.iterations == MIN_ITERATIONS == 4096 and MAX_ITERATIONS == 16384
    assert scram_credential("SCRAM-SHA-256", "pw", iterations=MAX_ITERATIONS).iterations == MAX_ITERATIONS
    for iterations in (MIN_ITERATIONS - 1, MAX_ITERATIONS + 1):
        with pytest.raises(ValueError, match="iterations"):
            scram_credential("SCRAM-SHA-256", "pw", iterations=iterations)
    with pytest.raises(ValueError):
        salted_password("SCRAM-SHA-256", "pw", b"salt", 0)
    with pytest.raises(ValueError, match="Unsupported SCRAM mechanism"):
        hash_of("PLAIN")


# ---------------------------------------------------------------------------------------------------------------
# PLAIN

USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def test_plain_success() -> None:
    server = PlainServer(plain_verifier(USERS))
    assert not server.complete and server.principal is None
    assert server.evaluate(b"\0alice\0alice-secret") == b""
    assert server.complete and server.principal == "alice"
    assert server.mechanism == "PLAIN"


def test_plain_authzid_equal_to_username_is_accepted() -> None:
    server = PlainServer(plain_verifier(USERS))
    assert server.evaluate(b"alice\0alice\0alice-secret") == b""
    assert server.principal == "alice"


@pytest.mark.parametrize(("token", "message"), [
    (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
    (b"\0mallory\0alice-secret", "Authentication failed: Invalid username or password"),
    (b"admin\0alice\0alice-secret",
     "Authentication failed: Client requested an authorization id that is different from username"),
    (b"\0\0alice-secret", "Authentication failed: username not specified"),
    (b"\0alice\0", "Authentication failed: password not specified"),
    (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    (b"\0alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"\0alice\0alice-secret\0", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    (b"\0alice\0\xff", "Invalid SASL/PLAIN response: not valid UTF-8"),
])
def test_plain_failures(token: bytes, message: str) -> None:
    server = PlainServer(plain_verifier(USERS))
    error = fails(server.evaluate, token)
    assert (error.code, error.message) == (ErrorCode.sasl_authentication_failed, message)
    assert not server.complete and server.principal is None


def test_plain_wrong_password_is_reported_before_authzid_mismatch() -> None:
    error = fails(PlainServer(plain_verifier(USERS)).evaluate, b"admin\0alice\0wrong")
    assert error.message == "Authentication failed: Invalid username or password"


def test_plain_failing_verifier_becomes_a_sasl_error() -> None:
    def verify(username: str, password: str) -> bool:
        raise RuntimeError("directory down")

    error = fails(PlainServer(verify).evaluate, b"\0alice\0alice-secret")
    assert error.message == "Authentication failed: credentials for user could not be verified"
    assert "directory down" in error.detail


def test_plain_token_after_the_exchange_is_illegal() -> None:
    server = PlainServer(plain_verifier(USERS))
    server.evaluate(b"\0alice\0alice-secret")
    assert fails(server.evaluate, b"\0alice\0alice-secret").code is ErrorCode.illegal_sasl_state
    failed = PlainServer(plain_verifier(USERS))
    fails(failed.evaluate, b"\0alice\0wrong")
    assert fails(failed.evaluate, b"\0alice\0alice-secret").code is ErrorCode.illegal_sasl_state


@SETTINGS
@given(st.one_of(st.binary(max_size=40), mutated(b"alice\0alice\0alice-secret")))
def test_any_plain_token_succeeds_or_raises_sasl_error(token: bytes) -> None:
    server = PlainServer(plain_verifier(USERS))
    try:
        assert server.evaluate(token) == b""
        assert server.principal in USERS
    except SaslError as error:
        assert error.code is ErrorCode.sasl_authentication_failed


@given(username=st.text(max_size=10), password=st.text(max_size=10))
def test_plain_verifier(username: str, password: str) -> None:
    verify = plain_verifier(USERS)
    assert verify(username, password) == (USERS.get(username) == password)
    assert verify("alice", "alice-secret")


# ---------------------------------------------------------------------------------------------------------------
# sasl.jaas.config

KAFKA_EXAMPLE = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                 'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def test_jaas_kafka_example() -> None:
    entry = parse_jaas_config(KAFKA_EXAMPLE)
    assert entry == JaasEntry(PLAIN_LOGIN_MODULE, "required", {
        "username": "admin", "password": "admin-secret", "user_admin": "admin-secret", "user_alice": "alice-secret"})
    assert plain_users(entry) == {"admin": "admin-secret", "alice": "alice-secret"}


@pytest.mark.parametrize("flag", ["required", "requisite", "sufficient", "optional", "REQUIRED", "Optional"])
def test_jaas_control_flags(flag: str) -> None:
    assert parse_jaas_config(f"test.Module {flag} propName=propValue;") == JaasEntry(
        "test.Module", flag.lower(), {"propName": "propValue"})


@pytest.mark.parametrize(("text", "options"), [
    ("m required;", {}),
    ("  m   required  ;  ", {}),
    ('m required a="prop value" b="value1 = 1, value2 = 2";', {"a": "prop value", "b": "value1 = 1, value2 = 2"}),
    ("m required a='single \"quoted\"';", {"a": 'single "quoted"'}),
    ('m required "prop name"=propValue;', {"prop name": "propValue"}),
    ('m required a="3" b="";', {"a": "3", "b": ""}),
    ("m required a=x.y-z_$1 b=$HOME c=_x;", {"a": "x.y-z_$1", "b": "$HOME", "c": "_x"}),
    ('m required a = "spaced" ;', {"a": "spaced"}),
    ('m required a="q\\"uote" b="back\\\\slash" c="tab\\tnl\\n" d="\\101\\60\\0" e="\\x";',
     {"a": 'q"uote', "b": "back\\slash", "c": "tab\tnl\n", "d": "A0\0", "e": "x"}),
    ('m required a="\\477";', {"a": "'7"}),  # Java's octal: a third digit only after 0-3
    ('m required a="p;w" b=";";', {"a": "p;w", "b": ";"}),
    ("m required a=x1;", {"a": "x1"}),
    ("m required a=b a=c;", {"a": "c"}),
    ("m required\n  a=b // a comment\n  /* another\n one */ c=d;", {"a": "b", "c": "d"}),
    ("m required a=\u00e9t\u00e9 b=\u65e5\u672c;", {"a": "\u00e9t\u00e9", "b": "\u65e5\u672c"}),
])
def test_jaas_options(text: str, options: dict[str, str]) -> None:
    assert parse_jaas_config(text).options == options


@pytest.mark.parametrize(("text", "message"), [
    ("", "Login module not specified"),
    ("  // only a comment", "Login module not specified"),
    ("  required option1=value1;", "Invalid login module control flag 'option1'"),
    ("test.loginModule option1=value1;", "Invalid login module control flag 'option1'"),
    ("test.loginModule", "control flag not specified"),
    ("test.loginModule { option1=3;", "Invalid login module control flag '{'"),
    ("loginModule required option1;", "Value not specified for key 'option1'"),
    ("loginModule required option1=;", "Value not specified for key 'option1'"),
    ("loginModule required option1==x;", "Value not specified for key 'option1'"),
    ("loginModule required option1=3;", "Value not specified for key 'option1'"),
    ("loginModule required option1=-x;", "Value not specified for key 'option1'"),
    ("loginModule required option1=/tmp/x;", "Value not specified for key 'option1'"),
    ("loginModule required =x;", "Invalid option name '='"),
    ("loginModule required 3=x;", "Invalid option name '3'"),
    ("test.testMissingSemicolon required option1=value1", "not terminated by semi-colon"),
    ('m required a="unterminated;', "Unterminated quoted string"),
    ('m required a="line\nbreak";', "Unterminated quoted string"),
    ("m required a=b; /* open", "Unterminated comment"),
    ("; m required;", "Invalid login module name ';'"),
    ('"" required;', "Invalid login module name ''"),
    ("a required; b optional;", "contains 2 login modules, should be 1 module"),
])
def test_jaas_malformed(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("{", "\\{")):
        parse_jaas_config(text)


def test_plain_users_only_from_plain_login_module() -> None:
    text = f'{SCRAM_LOGIN_MODULE} required username="admin" password="x" user_alice="y";'
    assert plain_users(parse_jaas_config(text)) == {}
    entry = parse_jaas_config(f'{PLAIN_LOGIN_MODULE} required user_="x" user_a_b="y" users="z";')
    assert plain_users(entry) == {"a_b": "y"}


def java_quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


option_names = st.from_regex(r"[A-Za-z_$][A-Za-z0-9_$.-]{0,10}", fullmatch=True)


@given(st.dictionaries(option_names, st.text(st.characters(codec="utf-8"), max_size=20), max_size=5))
def test_jaas_quoted_values_round_trip(options: dict[str, str]) -> None:
    text = f"{PLAIN_LOGIN_MODULE} sufficient " + " ".join(f"{k}={java_quote(v)}" for k, v in options.items()) + ";"
    assert parse_jaas_config(text) == JaasEntry(PLAIN_LOGIN_MODULE, "sufficient", options)


@given(st.one_of(st.text(max_size=60), st.text(alphabet='ab =;"\'\\/*\n1.-{', max_size=40)))
def test_jaas_any_text_parses_or_raises_value_error(text: str) -> None:
    try:
        entry = parse_jaas_config(text)
    except ValueError:
        return
    assert entry.login_module and entry.control_flag in ("required", "requisite", "sufficient", "optional")
