"""A fake Web Push service on loopback, for tests and benchmarks (design.md §13).

It speaks what a browser vendor's push service speaks (RFC 8030 delivery, RFC 8291 message
encryption, RFC 8292 VAPID) over HTTPS on 127.0.0.1, with a certificate from its own CA made
at start-up, so the board sends to it exactly as it would to a real one:

    service = PushService()                 # listening at once; service.url, service.ca_file
    sub = service.subscribe(name="phone")   # a browser's PushSubscription
    board.post("/api/push/subscriptions", sub.as_json() | {"name": "Phone", "events": [...]})
    (delivery,) = sub.wait_deliveries(1)
    assert delivery.vapid_ok and delivery.payload["kind"] == "approval"
    service.close()

Every POST to an endpoint is kept as a `Delivery`: headers, raw body, arrival time
(time.monotonic(), comparable across processes on one machine), the payload decrypted with the
subscription's private key and parsed as JSON, and the outcome of the VAPID check. Problems
(bad VAPID, missing TTL, wrong Content-Encoding, undecryptable body, bad Urgency or Topic, body
over 4096 bytes) are answered 401/403/400/413 like a real service would, unless the service is
made with strict=False, which only records them. A well-formed message gets the
subscription's scripted answer: 201 by default, `sub.answer(410)` from now on,
`sub.answers([500, 500, 201])` queued first, `sub.hang()` to accept and never answer.
`service.down()` closes the listener and drops every connection; `service.up()` listens again
on the same port.

The service runs on gevent (pywsgi with TLS, one greenlet per connection, keep-alive), so the
process must be monkey-patched (tests/conftest.py does; a bench script starts with
`from gevent import monkey; monkey.patch_all()`). Waiting helpers block on gevent events,
never sleep, and serve the board's requests while they wait — whether the board runs in this
process or another one (start it with `service.env`, which points `SSL_CERT_FILE` and
`REQUESTS_CA_BUNDLE` at the CA).
"""

import base64
import binascii
import contextlib
import datetime as dt
import ipaddress
import itertools
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import gevent
import gevent.event
import gevent.pool
import gevent.ssl
import http_ece
import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from gevent import pywsgi

#: A scripted answer that accepts the request and never answers it (see Subscription.hang).
HANG = "hang"

#: The largest body a push service must accept (RFC 8030 §7.2, RFC 8291 §4: 4096 octets).
MAX_BODY = 4096

#: How far ahead a VAPID token may expire (RFC 8292 §2: no more than 24 hours).
MAX_VAPID_LIFETIME = 24 * 60 * 60

URGENCIES = ("very-low", "low", "normal", "high")
TOPIC = re.compile(r"^[A-Za-z0-9_-]{1,32}$")  # RFC 8030 §5.4: at most 32 base64url characters

REASONS = {201: "Created", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
           404: "Not Found", 405: "Method Not Allowed", 410: "Gone",
           413: "Payload Too Large", 429: "Too Many Requests",
           500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


def b64url(data: bytes) -> str:
    """base64url without padding, as PushSubscription.toJSON() and VAPID write it."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    """Decode base64url with or without padding; binascii.Error when it is not base64url."""
    if not re.fullmatch(r"[A-Za-z0-9_-]*=*", text):
        raise binascii.Error("not base64url")
    text = text.rstrip("=")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def public_point(key) -> bytes:
    """The 65-byte uncompressed point of an EC public (or private) key."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        key = key.public_key()
    return key.public_bytes(serialization.Encoding.X962,
                            serialization.PublicFormat.UncompressedPoint)


# Certificates ####################################################################################

def make_certificates(hosts=("localhost",), ips=("127.0.0.1",), days=7):
    """A fresh CA and a leaf certificate for `hosts` and `ips` signed by it, all P-256.

    Returns (ca_pem, leaf_pem, leaf_key_pem) as bytes. The extensions are those a strict
    verifier (OpenSSL's X509_STRICT, Python 3.13's default) asks for."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Taskboard test push CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder()
          .subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(hours=1))
          .not_valid_after(now + dt.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(
              digital_signature=False, content_commitment=False, key_encipherment=False,
              data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
              encipher_only=False, decipher_only=False), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))

    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName(h) for h in hosts] + [x509.IPAddress(ipaddress.ip_address(i))
                                                for i in ips]
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
                ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256()))

    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return ca.public_bytes(pem), leaf.public_bytes(pem), key_pem


# VAPID (RFC 8292) ################################################################################

class VapidError(Exception):
    """The Authorization header is not a valid VAPID token for this push (status 401 or 403)."""

    def __init__(self, message, status=401):
        super().__init__(message)
        self.status = status


def check_vapid(authorization: str | None, origin: str, now: float | None = None):
    """Verify an `Authorization: vapid t=<JWT>, k=<key>` header for a push to `origin`.

    Returns (claims, k). Raises VapidError naming the first problem: the scheme, the JWT's
    form or ES256 signature (raw r||s, checked against k), `aud` not the endpoint's origin,
    `exp` past or more than 24 h ahead, `sub` missing or not a mailto:/https: URI."""
    now = time.time() if now is None else now
    if not authorization:
        raise VapidError("no Authorization header")
    scheme, _, rest = authorization.partition(" ")
    if scheme.lower() != "vapid":
        raise VapidError(f"Authorization scheme is {scheme!r}, not 'vapid' (RFC 8292)")
    params = {}
    for part in rest.split(","):
        name, eq, value = part.strip().partition("=")
        if eq:
            params[name.strip().lower()] = value.strip().strip('"')
    token, k = params.get("t"), params.get("k")
    if not token or not k:
        raise VapidError("Authorization lacks t= or k=")
    try:
        raw_key = unb64url(k)
        if len(raw_key) != 65 or raw_key[0] != 4:
            raise ValueError("k is not a 65-byte uncompressed P-256 point")
        key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw_key)
    except (ValueError, binascii.Error) as exc:
        raise VapidError(f"bad k: {exc}") from None
    pieces = token.split(".")
    if len(pieces) != 3:
        raise VapidError("t is not a JWT (header.claims.signature)")
    try:
        header = json.loads(unb64url(pieces[0]))
        claims = json.loads(unb64url(pieces[1]))
        signature = unb64url(pieces[2])
    except (ValueError, binascii.Error) as exc:
        raise VapidError(f"t is not a JWT: {exc}") from None
    if not isinstance(header, dict) or header.get("alg") != "ES256":
        raise VapidError(f"JWT alg is {header.get('alg') if isinstance(header, dict) else None!r}"
                         ", not ES256")
    if len(signature) != 64:
        raise VapidError("JWT signature is not 64 bytes (raw r||s)")
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"),
                               int.from_bytes(signature[32:], "big"))
    try:
        key.verify(der, f"{pieces[0]}.{pieces[1]}".encode("ascii"), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise VapidError("JWT signature does not verify with k") from None
    if not isinstance(claims, dict):
        raise VapidError("JWT claims are not an object")
    if claims.get("aud") != origin:
        raise VapidError(f"aud is {claims.get('aud')!r}, not the endpoint's origin {origin!r}")
    exp = claims.get("exp")
    if not isinstance(exp, int) or isinstance(exp, bool):
        raise VapidError(f"exp is {exp!r}, not an integer")
    if exp <= now:
        raise VapidError(f"exp {exp} has passed (now {now:.0f})")
    if exp > now + MAX_VAPID_LIFETIME:
        raise VapidError(f"exp {exp} is more than 24 h ahead (now {now:.0f})")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub.startswith(("mailto:", "https:")):
        raise VapidError(f"sub is {sub!r}, not a mailto: or https: URI")
    return claims, k


# Records #########################################################################################

@dataclass
class Delivery:
    """One POST to a push endpoint, as the service saw it."""

    sub_id: str                 #: the endpoint's id (the last path segment)
    name: str | None            #: the subscription's name
    headers: dict               #: request headers, names in lower case
    body: bytes = field(repr=False)  #: the raw (encrypted) body
    received: float             #: time.monotonic() when the body had arrived
    plaintext: bytes | None = None   #: the decrypted body (None when it did not decrypt)
    payload: object = None      #: plaintext parsed as JSON (None when not JSON)
    vapid_ok: bool = False      #: the VAPID token verified (and k fits a restricted sub)
    vapid_key: str | None = None     #: k from the Authorization header, as sent
    vapid_claims: dict | None = None  #: the JWT claims, when the token verified
    ttl: int | None = None      #: the TTL header (None when missing or not a number)
    urgency: str | None = None  #: the Urgency header, as sent
    topic: str | None = None    #: the Topic header, as sent
    problems: list = field(default_factory=list)  #: what a strict service refuses
    refusal: int | None = None  #: the status a strict service answers these problems with
    status: int | None = None   #: the answer given (None: not answered, see hang)


class Subscription:
    """A push subscription as a browser holds it: endpoint, P-256 key pair, auth secret."""

    def __init__(self, service, sub_id, name=None, application_server_key=None):
        self.service = service
        self.id = sub_id
        self.name = name
        self.endpoint = f"{service.url}/push/{sub_id}"
        self.private_key = ec.generate_private_key(ec.SECP256R1())
        self.p256dh = public_point(self.private_key)
        self.auth = secrets.token_bytes(16)
        #: When set (base64url, as PushManager.subscribe() takes it), pushes must be signed
        #: with this VAPID key, else 403 (RFC 8292 §4.2).
        self.application_server_key = application_server_key
        self.deliveries = []
        self._default = 201
        self._queue = []

    def __repr__(self):
        return f"<Subscription {self.name or self.id} {len(self.deliveries)} deliveries>"

    def as_json(self) -> dict:
        """What PushSubscription.toJSON() gives in a browser."""
        return {"endpoint": self.endpoint,
                "keys": {"p256dh": b64url(self.p256dh), "auth": b64url(self.auth)}}

    def answer(self, status):
        """Answer every later well-formed push with `status` (an int, (int, headers) or
        HANG) once the queued answers are used up."""
        self._default = status
        return self

    def answers(self, statuses):
        """Queue answers for the next well-formed pushes, e.g. [500, 500, 201]."""
        self._queue.extend(statuses)
        return self

    def hang(self):
        """Accept every later push and never answer it (until down() or close())."""
        return self.answer(HANG)

    def next_answer(self):
        return self._queue.pop(0) if self._queue else self._default

    def decrypt(self, body: bytes) -> bytes:
        """Decrypt an aes128gcm body sent to this subscription (RFC 8291)."""
        return http_ece.decrypt(body, private_key=self.private_key, auth_secret=self.auth,
                                version="aes128gcm")

    def wait_deliveries(self, n=1, timeout=10.0):
        """Wait until this endpoint has received at least n pushes; the first n."""
        self.service.wait_for(lambda: len(self.deliveries) >= n, timeout,
                              message=f"{n} deliveries to {self.name or self.id}")
        return self.deliveries[:n]


# The service #####################################################################################

class _Handler(pywsgi.WSGIHandler):
    def handle_error(self, t, v, tb):
        if issubclass(t, gevent.GreenletExit):  # killed by down()/close(): drop, never answer
            self.close_connection = True
            return
        super().handle_error(t, v, tb)


class _Server(pywsgi.WSGIServer):
    handler_class = _Handler

    def __init__(self, *args, on_tls_failure, on_connection, **kwargs):
        super().__init__(*args, **kwargs)
        self.on_tls_failure = on_tls_failure
        self.on_connection = on_connection
        self.sockets = set()  # accepted and not yet closed

    def do_handle(self, client_socket, address):
        self.sockets.add(client_socket)
        super().do_handle(client_socket, address)

    def do_close(self, client_socket, *args):
        self.sockets.discard(client_socket)
        super().do_close(client_socket, *args)

    def stop(self, timeout=None):
        """Also close the connections whose handler was killed before it ever ran."""
        super().stop(timeout)
        for client_socket in list(self.sockets):
            self.do_close(client_socket)

    def wrap_socket_and_handle(self, client_socket, address):
        # the handshake runs inside closing(): a handler killed during it leaks nothing
        tls = self.wrap_socket(client_socket, **self.ssl_args, do_handshake_on_connect=False)
        with contextlib.closing(tls):
            try:
                tls.do_handshake()
            except OSError as exc:  # the client refused our certificate, or went away
                self.on_tls_failure(exc)
                return None
            self.on_connection()
            return self.handle(tls, address)


class PushService:
    """A push service on https://127.0.0.1:<port>, listening from construction on.

    strict=True answers malformed pushes like a real service (401/403/400/413); strict=False
    answers them with the scripted answer and only records the problems."""

    def __init__(self, strict=True, host="127.0.0.1", port=0):
        self.strict = strict
        self.subscriptions = {}
        self.deliveries = []
        #: TLS handshakes that failed (e.g. a client that does not trust the CA).
        self.tls_failures = []
        #: TLS connections accepted so far (keep-alive reuses one for many pushes).
        self.connections = 0
        self._changed = gevent.event.Event()
        self._ids = itertools.count(1)
        self._dir = tempfile.mkdtemp(prefix="push-service-")
        ca_pem, leaf_pem, key_pem = make_certificates()
        self.ca_pem = ca_pem
        #: The CA certificate (PEM) to trust: SSL_CERT_FILE / REQUESTS_CA_BUNDLE / verify=.
        self.ca_file = self._write("ca.pem", ca_pem)
        leaf_file, key_file = self._write("leaf.pem", leaf_pem), self._write("leaf.key", key_pem)
        self._context = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(leaf_file, key_file)
        os.unlink(key_file)
        self._server = None
        self._listen(host, port)
        self.host, self.port = self._server.address[:2]
        self.url = f"https://{self.host}:{self.port}"

    def __repr__(self):
        return f"<PushService {self.url} {len(self.deliveries)} deliveries>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def env(self) -> dict:
        """Environment variables that make a board (or requests, or ssl) trust this service."""
        return {"SSL_CERT_FILE": self.ca_file, "REQUESTS_CA_BUNDLE": self.ca_file}

    def subscribe(self, name=None, application_server_key=None) -> Subscription:
        """A new subscription with its own endpoint, key pair and auth secret."""
        sub_id = f"{next(self._ids)}-{secrets.token_urlsafe(12)}"
        sub = Subscription(self, sub_id, name, application_server_key)
        self.subscriptions[sub_id] = sub
        return sub

    def wait_for(self, predicate, timeout=10.0, message="condition"):
        """Wait, serving pushes meanwhile, until predicate() is truthy after some change
        (a push arrived, a TLS handshake failed); its value. AssertionError after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            changed = self._changed  # taken first: a change while predicate() runs still wakes
            value = predicate()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"push service: timed out after {timeout}s waiting for "
                                     f"{message}")
            changed.wait(left)

    def wait_deliveries(self, n=1, timeout=10.0):
        """Wait until the service has received at least n pushes (any endpoint); the first n."""
        self.wait_for(lambda: len(self.deliveries) >= n, timeout, message=f"{n} deliveries")
        return self.deliveries[:n]

    def down(self):
        """Stop listening and drop every connection, answered or not (hanging ones too)."""
        if self._server is not None:
            server, self._server = self._server, None
            server.stop(timeout=0)

    def up(self):
        """Listen again on the same port after down()."""
        if self._server is None:
            self._listen(self.host, self.port)

    def close(self):
        """down(), and remove the certificate files."""
        self.down()
        shutil.rmtree(self._dir, ignore_errors=True)

    # internals

    def _write(self, name, data):
        path = os.path.join(self._dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def _listen(self, host, port):
        server = _Server((host, port), self._app, log=None, spawn=gevent.pool.Pool(),
                         ssl_context=self._context, on_tls_failure=self._tls_failed,
                         on_connection=self._connected)
        server.start()
        self._server = server

    def _notify(self):
        changed, self._changed = self._changed, gevent.event.Event()
        changed.set()

    def _connected(self):
        self.connections += 1

    def _tls_failed(self, exc):
        self.tls_failures.append(exc)
        self._notify()

    def _app(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        match = re.fullmatch(r"/push/([^/]+)", path)
        sub = self.subscriptions.get(match.group(1)) if match else None
        if sub is None:
            return _respond(start_response, 404, "no such push endpoint")
        if environ["REQUEST_METHOD"] != "POST":
            return _respond(start_response, 405, "POST a push message", [("Allow", "POST")])
        body = environ["wsgi.input"].read()
        delivery = self._record(sub, environ, body)
        status = delivery.refusal if self.strict else None
        headers = []
        if status is None:
            answer = sub.next_answer()
            if answer == HANG:
                self._notify()
                gevent.event.Event().wait()  # until down()/close() kills this greenlet
            status, headers = answer if isinstance(answer, tuple) else (answer, [])
            headers = list(dict(headers).items())
            if status == 201:
                headers.append(("Location", f"{self.url}/message/{secrets.token_urlsafe(9)}"))
        delivery.status = status
        self._notify()
        message = "; ".join(delivery.problems) if status >= 400 else ""
        return _respond(start_response, status, message, headers)

    def _record(self, sub, environ, body):
        headers = {key[5:].replace("_", "-").lower(): value
                   for key, value in environ.items() if key.startswith("HTTP_")}
        for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            if environ.get(key):
                headers[key.replace("_", "-").lower()] = environ[key]
        authorization = headers.get("authorization")
        d = Delivery(sub_id=sub.id, name=sub.name, headers=headers, body=body,
                     received=time.monotonic(), vapid_key=_header_param(authorization, "k"),
                     urgency=headers.get("urgency"), topic=headers.get("topic"))
        refusals = []
        try:
            d.vapid_claims, _ = check_vapid(authorization, self.url)
            restricted = sub.application_server_key
            if restricted and unb64url(d.vapid_key) != unb64url(restricted):
                d.vapid_claims = None
                raise VapidError("k is not the subscription's applicationServerKey", 403)
            d.vapid_ok = True
        except VapidError as exc:
            d.problems.append(f"vapid: {exc}")
            refusals.append(exc.status)
        if len(body) > MAX_BODY:
            d.problems.append(f"body is {len(body)} bytes, over {MAX_BODY}")
            refusals.insert(0, 413)
        ttl = headers.get("ttl")
        if ttl is None or not re.fullmatch(r"[0-9]+", ttl):
            d.problems.append(f"TTL header is {ttl!r}, not a non-negative integer")
        else:
            d.ttl = int(ttl)
        if d.urgency is not None and d.urgency not in URGENCIES:
            d.problems.append(f"Urgency {d.urgency!r} is not one of {', '.join(URGENCIES)}")
        if d.topic is not None and not TOPIC.match(d.topic):
            d.problems.append(f"Topic {d.topic!r} is not 1-32 base64url characters")
        if body:
            encoding = headers.get("content-encoding")
            if encoding != "aes128gcm":
                d.problems.append(f"Content-Encoding is {encoding!r}, not aes128gcm")
            try:
                d.plaintext = sub.decrypt(body)
            except Exception as exc:  # http_ece raises ECEException, InvalidTag, ValueError…
                d.problems.append(f"body does not decrypt: {type(exc).__name__} {exc}")
            else:
                with contextlib.suppress(ValueError):
                    d.payload = json.loads(d.plaintext)
        if d.problems:  # too large first, then VAPID, then the rest
            d.refusal = (refusals or [400])[0]
        sub.deliveries.append(d)
        self.deliveries.append(d)
        return d


def _header_param(authorization, name):
    for part in (authorization or "").partition(" ")[2].split(","):
        key, _, value = part.strip().partition("=")
        if key.strip().lower() == name:
            return value.strip().strip('"')
    return None


def _respond(start_response, status, message="", headers=()):
    reason = REASONS.get(status, "Status")
    body = b"" if status < 400 else json.dumps(
        {"code": status, "error": reason, "message": message}).encode()
    start_response(f"{status} {reason}", [("Content-Length", str(len(body))), *headers,
                                          *([("Content-Type", "application/json")] if body
                                            else [])])
    return [body]


@pytest.fixture(name="push_service")
def push_service_fixture(monkeypatch):
    """A PushService for one test; this process and its children trust its CA."""
    service = PushService()
    for name, value in service.env.items():
        monkeypatch.setenv(name, value)
    yield service
    service.close()
