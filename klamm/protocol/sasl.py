"""SASL mechanisms as sans-io server state machines (PLAIN, SCRAM-SHA-256/512).

The broker feeds each SaslAuthenticate token to a mechanism and sends back what it
returns; the mechanism never touches a socket or the credential store (it asks a
lookup function).

Behaviour follows Kafka's PlainSaslServer and ScramSaslServer. A failure raises
`SaslError`, whose `message` is what Kafka tells the client: the specific text
where Kafka sends one (SaslAuthenticationException), otherwise the generic
"invalid credentials" sentence, so that a client cannot learn which users exist.
`detail` says what really went wrong, for the broker's log only.

Also here: SCRAM credential derivation (RFC 5802 section 3) and the parser for
Kafka's `sasl.jaas.config` value (JaasConfig's grammar, one login module).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from klamm.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "MAX_ITERATIONS", "MIN_ITERATIONS", "PLAIN_LOGIN_MODULE", "SCRAM_LOGIN_MODULE", "SCRAM_MECHANISMS",
    "JaasEntry", "PlainServer", "SaslError", "ScramCredential", "ScramServer",
    "credential_from_salted_password", "hash_of", "parse_jaas_config", "plain_users", "plain_verifier",
    "salted_password", "scram_credential",
]

# Kafka's ScramMechanism codes (AlterUserScramCredentials, UserScramCredentialRecord)
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


@dataclass(frozen=True)
class ScramCredential:
    """What the server keeps of a SCRAM password (RFC 5802): never the password itself."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


# Kafka's ScramMechanism bounds, the same for both hashes. Fewer iterations fail the
# authentication; more are refused when a credential is created (AlterUserScramCredentials).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class SaslError(KafkaError):
    """An authentication that failed (or a token that came at the wrong time).

    `message` goes to the client in SaslAuthenticateResponse.error_message;
    `detail` is the real reason, for the broker's log and never for the client.
    """

    message: str  # always set, unlike KafkaError's

    def __init__(self, code: ErrorCode, message: str, detail: str | None = None) -> None:
        super().__init__(code, message)
        self.detail = detail or message

    def __repr__(self) -> str:
        return f"SaslError({self.code.name}, {self.message!r}, detail={self.detail!r})"


class _State(enum.Enum):
    CLIENT_FIRST = "waiting for the client's first message"
    CLIENT_FINAL = "waiting for the client's final message"
    COMPLETE = "complete"
    FAILED = "failed"


def _unexpected_token(mechanism: str, state: _State) -> SaslError:
    return SaslError(ErrorCode.illegal_sasl_state,
                     f"Unexpected SASL token: the {mechanism} exchange is {state.value}")


def _authentication_failed(message: str, detail: str | None = None) -> SaslError:
    return SaslError(ErrorCode.sasl_authentication_failed, message, detail)


# ---------------------------------------------------------------------------------------------------------------
# PLAIN (RFC 4616)


class PlainServer:
    """SASL/PLAIN: one token, `authzid NUL authcid NUL passwd`, answered with an empty token.

    `verify(username, password)` decides; it should compare in constant time
    (`plain_verifier` does).
    """

    mechanism = "PLAIN"

    def __init__(self, verify: Callable[[str, str], bool]) -> None:
        self._verify = verify
        self._state = _State.CLIENT_FIRST
        self._principal: str | None = None

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def principal(self) -> str | None:
        """The authenticated user name, once `complete`."""
        return self._principal

    def evaluate(self, token: bytes) -> bytes:
        if self._state is not _State.CLIENT_FIRST:
            raise _unexpected_token(self.mechanism, self._state)
        try:
            self._principal = self._authenticate(token)
        except SaslError:
            self._state = _State.FAILED
            raise
        self._state = _State.COMPLETE
        return b""

    def _authenticate(self, token: bytes) -> str:
        authzid, username, password = _plain_fields(token)
        if not username:
            raise _authentication_failed("Authentication failed: username not specified")
        if not password:
            raise _authentication_failed("Authentication failed: password not specified")
        try:
            verified = self._verify(username, password)
        except Exception as e:  # a broken verifier must not look like a protocol error
            raise _authentication_failed("Authentication failed: credentials for user could not be verified",
                                         f"PLAIN verifier failed for {username!r}: {e!r}") from e
        if not verified:
            raise _authentication_failed("Authentication failed: Invalid username or password")
        # Kafka checks the authorization id only after the password, so a wrong password never learns more.
        if authzid and authzid != username:
            raise _authentication_failed(
                "Authentication failed: Client requested an authorization id that is different from username")
        return username


def _plain_fields(token: bytes) -> tuple[str, str, str]:
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        # Kafka would decode with replacement characters; refusing is safer (two passwords cannot collide).
        raise _authentication_failed("Invalid SASL/PLAIN response: not valid UTF-8") from None
    fields = text.split("\0")
    if len(fields) != 3:
        raise _authentication_failed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(fields)}")
    return fields[0], fields[1], fields[2]


def plain_verifier(users: Mapping[str, str]) -> Callable[[str, str], bool]:
    """A `PlainServer` verifier over `{user: password}` (e.g. `plain_users(entry)`), comparing in constant time."""

    def verify(username: str, password: str) -> bool:
        expected = users.get(username)
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())

    return verify


# ---------------------------------------------------------------------------------------------------------------
# SCRAM credentials (RFC 5802 section 3)


def hash_of(mechanism: str) -> str:
    """The hashlib name of a SCRAM mechanism's hash ("sha256" for SCRAM-SHA-256)."""
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(f"Unsupported SCRAM mechanism {mechanism!r}; supported: {sorted(_HASHES)}") from None


def _hmac(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_of(mechanism)).digest()


def _digest(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(hash_of(mechanism), data).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, iterations): PBKDF2 with the mechanism's HMAC, one hash length long.

    Like Kafka, the password's UTF-8 bytes are used without SASLprep normalisation.
    """
    if iterations < 1:
        raise ValueError(f"SCRAM iterations must be positive, got {iterations}")
    return hashlib.pbkdf2_hmac(hash_of(mechanism), password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """StoredKey = H(HMAC(salted, "Client Key")), ServerKey = HMAC(salted, "Server Key")."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(salt=salt,
                           stored_key=_digest(mechanism, client_key),
                           server_key=_hmac(mechanism, salted, b"Server Key"),
                           iterations=iterations)


def scram_credential(mechanism: str, password: str, salt: bytes | None = None,
                     iterations: int = MIN_ITERATIONS) -> ScramCredential:
    """A credential for `password`, with a random salt unless one is given.

    Iterations outside Kafka's [MIN_ITERATIONS, MAX_ITERATIONS] are refused, as
    Kafka refuses such credentials (and could not authenticate with fewer).
    """
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"SCRAM iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, "
                         f"got {iterations}")
    if salt is None:
        salt = secrets.token_bytes(16)
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salted, salt, iterations)


# ---------------------------------------------------------------------------------------------------------------
# SCRAM messages (RFC 5802 section 7), restricted as Kafka restricts them: ASCII names and values, only the
# gs2 flag "n" (no channel binding), no mandatory extension ("m=").

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"  # no bare ',' or '='
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"  # nonce characters: printable, no ','
_EXTENSION = r"[A-Za-z]+=[\x01-\x2b\x2d-\x7f]+"
_BASE64 = r"[A-Za-z0-9+/]*={0,2}"

_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)"
    rf"(?P<bare>n=(?P<name>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>(?:,{_EXTENSION})*))")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<binding>{_BASE64}),r=(?P<nonce>{_PRINTABLE})(?:,{_EXTENSION})*),"
    rf"p=(?P<proof>{_BASE64})")

_ESCAPED_NAME_CHAR = re.compile("=(2C|3D)")

# Kafka's ScramLoginModule.TOKEN_AUTH_CONFIG: the client authenticates with a delegation token.
_TOKEN_AUTH = "tokenauth"


def _sasl_name_to_user(name: str) -> str:
    return _ESCAPED_NAME_CHAR.sub(lambda m: "," if m.group(1) == "2C" else "=", name)


def _extensions(text: str) -> dict[str, str]:
    """",k=v,k2=v2" -> {k: v, k2: v2}; a repeated key keeps its last value, as in Kafka."""
    pairs = (item.split("=", 1) for item in text.split(",")[1:])
    return {key: value for key, value in pairs}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _random_nonce() -> str:
    return secrets.token_urlsafe(24)  # 192 random bits; URL-safe base64 has no ','


class ScramServer:
    """SASL/SCRAM-SHA-256 or -512, server side: two tokens in, two tokens out.

    client-first  -> server-first  `r=<client nonce><server nonce>,s=<salt>,i=<iterations>`
    client-final  -> server-final  `v=<server signature>`

    `lookup(username)` returns the user's credential or None. `nonce()` makes the
    server's share of the nonce (random unless injected, which tests use to replay
    RFC 7677's example).

    A client that sends the `tokenauth=true` extension authenticates with a delegation
    token (KIP-48): its user name is the token id, `token_lookup(token id)` gives the
    token's credential, its owner's name and its expiry (ms since the epoch), and the
    principal is the owner's; `token_authenticated` says so and `credential_expiry_ms`
    ends the session with the token. Without `token_lookup` such a client is refused.
    """

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None],
                 nonce: Callable[[], str] | None = None,
                 token_lookup: Callable[[str], tuple[ScramCredential, str, int] | None] | None = None) -> None:
        hash_of(mechanism)  # refuse an unknown mechanism now rather than mid-exchange
        self.mechanism = mechanism
        self._lookup = lookup
        self._token_lookup = token_lookup
        self._make_nonce = nonce or _random_nonce
        self._state = _State.CLIENT_FIRST
        self._principal: str | None = None
        self._authorization_id = ""  # the principal's name once the first message is read
        self.token_authenticated = False
        self.credential_expiry_ms: int | None = None
        # What the client-final step needs from the first round; dropped when the exchange ends.
        self._username = ""
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def principal(self) -> str | None:
        """The authenticated user name, once `complete`."""
        return self._principal

    def evaluate(self, token: bytes) -> bytes:
        if self._state is _State.CLIENT_FIRST:
            step = self._client_first
        elif self._state is _State.CLIENT_FINAL:
            step = self._client_final
        else:
            raise _unexpected_token(self.mechanism, self._state)
        try:
            return step(token)
        except SaslError:
            self._end(_State.FAILED)
            raise

    def _invalid_credentials(self, detail: str) -> SaslError:
        # Kafka's SaslServerAuthenticator hides SaslException texts behind this one sentence.
        return _authentication_failed("Authentication failed during authentication due to invalid credentials "
                                      f"with SASL mechanism {self.mechanism}", detail)

    def _decode(self, token: bytes, which: str) -> str:
        try:
            return token.decode("ascii")
        except UnicodeDecodeError:
            raise self._invalid_credentials(f"SCRAM client {which} message is not ASCII") from None

    def _client_first(self, token: bytes) -> bytes:
        text = self._decode(token, "first")
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            if text.startswith(("y,", "p=")):
                raise self._invalid_credentials(f"SCRAM channel binding is not supported: {text!r}")
            raise self._invalid_credentials(f"Invalid SCRAM client first message format: {text!r}")
        username = _sasl_name_to_user(match["name"])
        if _extensions(match["extensions"]).get(_TOKEN_AUTH, "").lower() == "true":
            credential = self._find_token(username)
        else:
            credential = self._find(username)
            self._authorization_id = username
        # RFC 5802 escapes the authzid like the user name; Kafka compares it unescaped, which fails names with
        # ',' or '='. We unescape both.
        authzid = _sasl_name_to_user(match["authzid"] or "")
        if authzid and authzid != username:
            raise _authentication_failed(
                "Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < MIN_ITERATIONS:
            raise self._invalid_credentials(f"Iterations {credential.iterations} is less than the minimum "
                                            f"{MIN_ITERATIONS} for {self.mechanism}")
        self._username = username
        self._credential = credential
        self._gs2_header = match["gs2"]
        self._client_first_bare = match["bare"]
        self._nonce = match["nonce"] + self._make_nonce()
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = _State.CLIENT_FINAL
        return self._server_first.encode("ascii")

    def _find_token(self, token_id: str) -> ScramCredential:
        if self._token_lookup is None:
            raise _authentication_failed("Authentication failed: delegation token authentication is not supported",
                                         f"SCRAM client asked for delegation token authentication as {token_id!r}")
        found = self._token_lookup(token_id)
        if found is None:
            raise self._invalid_credentials(f"Token Authentication failed: Invalid tokenId : {token_id}")
        credential, self._authorization_id, self.credential_expiry_ms = found
        self.token_authenticated = True
        return credential

    def _find(self, username: str) -> ScramCredential:
        try:
            credential = self._lookup(username)
        except Exception as e:  # a failing credential store must not escape as anything but a SaslError
            raise self._invalid_credentials(f"Authentication failed: Credentials could not be obtained "
                                            f"for {username!r}: {e!r}") from e
        if credential is None:
            raise self._invalid_credentials(f"Authentication failed: Invalid user credentials for {username!r}")
        return credential

    def _client_final(self, token: bytes) -> bytes:
        text = self._decode(token, "final")
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise self._invalid_credentials(f"Invalid SCRAM client final message format: {text!r}")
        try:
            binding = base64.b64decode(match["binding"], validate=True)
            proof = base64.b64decode(match["proof"], validate=True)
        except binascii.Error:
            raise self._invalid_credentials(f"Invalid base64 in SCRAM client final message: {text!r}") from None
        # Without channel binding, c= must repeat the gs2 header of the first message ("biws" for "n,,").
        if binding != self._gs2_header.encode("ascii"):
            raise self._invalid_credentials(f"SCRAM channel binding {binding!r} does not match the gs2 header "
                                            f"{self._gs2_header!r}")
        if match["nonce"] != self._nonce:
            raise self._invalid_credentials("Invalid client nonce in the final client message.")
        auth_message = f"{self._client_first_bare},{self._server_first},{match['without_proof']}".encode("ascii")
        self._verify_proof(proof, auth_message)
        assert self._credential is not None  # set by the client-first step
        server_signature = _hmac(self.mechanism, self._credential.server_key, auth_message)
        self._principal = self._authorization_id
        self._end(_State.COMPLETE)
        return f"v={_b64(server_signature)}".encode("ascii")

    def _verify_proof(self, proof: bytes, auth_message: bytes) -> None:
        """ClientKey = proof XOR HMAC(StoredKey, AuthMessage) must hash to StoredKey."""
        assert self._credential is not None
        stored_key = self._credential.stored_key
        client_signature = _hmac(self.mechanism, stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise self._invalid_credentials(f"SCRAM client proof has {len(proof)} bytes, "
                                            f"expected {len(client_signature)}")
        client_key = bytes(p ^ s for p, s in zip(proof, client_signature))
        if not hmac.compare_digest(_digest(self.mechanism, client_key), stored_key):
            raise self._invalid_credentials(f"Invalid client credentials for {self._username!r}")

    def _end(self, state: _State) -> None:
        self._state = state
        self._credential = None  # keep no key material once the exchange is over
        self._username = ""


# ---------------------------------------------------------------------------------------------------------------
# sasl.jaas.config (Kafka's JaasConfig): `<login module> <control flag> (<name>=<value>)* ;`
#
# Kafka tokenizes with java.io.StreamTokenizer, and we follow its rules: words are letters, digits, '.', '-',
# '_' and '$' (not starting with a digit, '.' or '-', which make a number, and numbers are not accepted as
# names or values); values with anything else are quoted with '"' or "'", where backslash escapes work as in
# Java; `//`, `/* */` and a lone `/` start comments. Where StreamTokenizer quietly ends an unterminated quote
# or comment at a line end or the end of the text, we refuse the text.

_CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
_JAVA_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_OCTAL = "01234567"


@dataclass(frozen=True)
class JaasEntry:
    """One login module of a JAAS configuration; `control_flag` is lower case."""

    login_module: str
    control_flag: str
    options: dict[str, str]


@dataclass(frozen=True)
class _Token:
    kind: str  # "word", "quoted", "number" or "char" (a single other character)
    text: str

    def is_char(self, char: str) -> bool:
        return self.kind == "char" and self.text == char

    def is_name(self) -> bool:
        """Usable as a module name, flag, option name or value (StreamTokenizer's sval is set)."""
        return self.kind in ("word", "quoted")


def parse_jaas_config(text: str) -> JaasEntry:
    """Parse a `sasl.jaas.config` value, which must hold exactly one login module (as Kafka requires)."""
    tokens = _jaas_tokens(text)
    entries: list[JaasEntry] = []
    position = 0
    while position < len(tokens):
        entry, position = _jaas_entry(tokens, position)
        entries.append(entry)
    if not entries:
        raise ValueError("Login module not specified in JAAS config")
    if len(entries) != 1:
        raise ValueError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """The `user_<name>="<password>"` options of a PlainLoginModule entry, as {name: password}.

    Kafka's PlainServerCallbackHandler reads them only from PlainLoginModule, so
    any other module gives no users.
    """
    if entry.login_module != PLAIN_LOGIN_MODULE:
        return {}
    prefix = "user_"
    return {key[len(prefix):]: value for key, value in entry.options.items()
            if key.startswith(prefix) and len(key) > len(prefix)}


def _jaas_entry(tokens: list[_Token], position: int) -> tuple[JaasEntry, int]:
    module = tokens[position]
    if not module.is_name() or not module.text:
        raise ValueError(f"Invalid login module name {module.text!r} in JAAS config")
    position += 1
    if position == len(tokens):
        raise ValueError("Login module control flag not specified in JAAS config")
    flag = tokens[position]
    if not flag.is_name() or flag.text.lower() not in _CONTROL_FLAGS:
        raise ValueError(f"Invalid login module control flag '{flag.text}' in JAAS config")
    position += 1
    options: dict[str, str] = {}
    while position < len(tokens) and not tokens[position].is_char(";"):
        key = tokens[position]
        if not key.is_name():
            raise ValueError(f"Invalid option name '{key.text}' in JAAS config")
        has_value = (position + 2 < len(tokens) and tokens[position + 1].is_char("=")
                     and tokens[position + 2].is_name())
        if not has_value:
            raise ValueError(f"Value not specified for key '{key.text}' in JAAS config")
        options[key.text] = tokens[position + 2].text
        position += 3
    if position == len(tokens):
        raise ValueError("JAAS config entry not terminated by semi-colon")
    return JaasEntry(module.text, flag.text.lower(), options), position + 1


def _is_word_start(char: str) -> bool:
    # StreamTokenizer's defaults plus Kafka's additions: ASCII letters, '_', '$', and characters from U+00A0 up.
    return char.isascii() and (char.isalpha() or char in "_$") or ord(char) >= 0xA0


def _is_word_part(char: str) -> bool:
    return _is_word_start(char) or char.isdigit() and char.isascii() or char in ".-"


def _is_number_part(char: str) -> bool:
    return char in "0123456789."


def _jaas_tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char <= " ":
            i += 1
        elif char == "/":
            i = _skip_comment(text, i)
        elif char in "\"'":
            value, i = _quoted(text, i)
            tokens.append(_Token("quoted", value))
        elif _is_number_part(char) or char == "-" and i + 1 < len(text) and _is_number_part(text[i + 1]):
            end = i + 1
            while end < len(text) and _is_number_part(text[end]):
                end += 1
            tokens.append(_Token("number", text[i:end]))
            i = end
        elif _is_word_start(char):
            end = i + 1
            while end < len(text) and _is_word_part(text[end]):
                end += 1
            tokens.append(_Token("word", text[i:end]))
            i = end
        else:
            tokens.append(_Token("char", char))
            i += 1
    return tokens


def _skip_comment(text: str, start: int) -> int:
    """The index after the comment at `start` (a '/')."""
    if text.startswith("/*", start):
        end = text.find("*/", start + 2)
        if end < 0:
            raise ValueError(f"Unterminated comment at position {start} in JAAS config")
        return end + 2
    # '//' and, as in StreamTokenizer, a lone '/' comment out the rest of the line.
    end = start
    while end < len(text) and text[end] not in "\r\n":
        end += 1
    return end


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The value of the quoted string at `start`, and the index after its closing quote."""
    quote = text[start]
    chars: list[str] = []
    i = start + 1
    while i < len(text) and text[i] not in "\r\n":
        char = text[i]
        if char == quote:
            return "".join(chars), i + 1
        if char == "\\" and i + 1 < len(text):
            char, i = _escape(text, i + 1)
        else:
            i += 1
        chars.append(char)
    raise ValueError(f"Unterminated quoted string at position {start} in JAAS config")


def _escape(text: str, start: int) -> tuple[str, int]:
    """The character escaped at `start` (just after a backslash), and the index after the escape."""
    char = text[start]
    if char not in _OCTAL:
        return _JAVA_ESCAPES.get(char, char), start + 1
    # Java's octal escapes: up to three digits, the third only when the first is 0-3 (at most \377).
    digits = 3 if char in "0123" else 2
    end = start + 1
    while end < len(text) and end - start < digits and text[end] in _OCTAL:
        end += 1
    return chr(int(text[start:end], 8)), end
