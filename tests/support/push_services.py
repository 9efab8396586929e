"""Push services for tests, real servers on 127.0.0.1: an HTTP/1.1 one (a Web Push service, FCM,
an OAuth token endpoint) and an HTTP/2 one over TLS (APNs), each answering as the test scripts
it and recording every request; and what a browser does with a push subscription."""

import base64
import dataclasses
import http.server
import json
import os
import socket
import ssl
import threading
from collections.abc import Callable

import h2.config
import h2.connection
import h2.events
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes


# An answer: a status, or (status, headers, body).
Answer = int | tuple[int, dict[str, str], bytes]
Script = Callable[[Request], Answer]


def _parts(answer: Answer) -> tuple[int, dict[str, str], bytes]:
    return (answer, {}, b"") if isinstance(answer, int) else answer


class Service:
    """An HTTP/1.1 server answering every request by `script`, recording them."""

    def __init__(self, script: Script):
        self.requests: list[Request] = []
        self.script = script
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                request = Request("POST", self.path, headers, body)
                service.requests.append(request)
                status, extra, content = _parts(service.script(request))
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> "Service":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        self._server.shutdown()
        self._server.server_close()


class Http2Service:
    """An HTTP/2 server over TLS (ALPN h2 only, as APNs), answering by `script`, recording each
    request with the protocol it came in (`alpn`)."""

    def __init__(self, script: Script, cert_file: str, key_file: str):
        self.requests: list[Request] = []
        self.protocols: list[str | None] = []
        self.script = script
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(cert_file, key_file)
        self._tls.set_alpn_protocols(["h2"])
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stop = threading.Event()
        self.url = f"https://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> "Http2Service":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                plain, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(plain,), daemon=True).start()

    def _serve(self, plain: socket.socket) -> None:
        try:
            sock = self._tls.wrap_socket(plain, server_side=True)
        except (ssl.SSLError, OSError):
            plain.close()
            return
        self.protocols.append(sock.selected_alpn_protocol())
        connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        connection.initiate_connection()
        sock.sendall(connection.data_to_send())
        streams: dict[int, tuple[dict, bytearray]] = {}
        with sock:
            while not self._stop.is_set():
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                for event in connection.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        headers = {_text(k): _text(v) for k, v in event.headers}
                        streams[event.stream_id] = (headers, bytearray())
                    elif isinstance(event, h2.events.DataReceived):
                        streams[event.stream_id][1].extend(event.data)
                        connection.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                    elif isinstance(event, h2.events.StreamEnded):
                        headers, body = streams.pop(event.stream_id)
                        self._answer(connection, event.stream_id, headers, bytes(body))
                sock.sendall(connection.data_to_send())

    def _answer(self, connection, stream_id: int, headers: dict, body: bytes) -> None:
        request = Request(headers[":method"], headers[":path"], headers, body)
        self.requests.append(request)
        status, extra, content = _parts(self.script(request))
        response = [(":status", str(status)), *((k.lower(), v) for k, v in extra.items())]
        response.append(("content-length", str(len(content))))
        connection.send_headers(stream_id, response, end_stream=not content)
        if content:
            connection.send_data(stream_id, content, end_stream=True)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


# -- A browser's side of Web Push


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclasses.dataclass(frozen=True)
class BrowserSubscription:
    """What a browser makes when a page subscribes: a P-256 key pair and 16 random bytes of
    authentication secret, and `toJSON()` of the PushSubscription."""

    private_key: ec.EllipticCurvePrivateKey
    auth: bytes
    endpoint: str

    @classmethod
    def new(cls, endpoint: str) -> "BrowserSubscription":
        return cls(ec.generate_private_key(ec.SECP256R1()), os.urandom(16), endpoint)

    @property
    def public_bytes(self) -> bytes:
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )

    def to_json(self) -> dict:
        keys = {"p256dh": b64url(self.public_bytes), "auth": b64url(self.auth)}
        return {"endpoint": self.endpoint, "expirationTime": None, "keys": keys}

    def decrypt(self, body: bytes) -> bytes:
        """RFC 8291 3.4 and RFC 8188 2, as the browser reads a push message (one record)."""
        salt, record_size, id_length = body[:16], int.from_bytes(body[16:20]), body[20]
        sender_public = body[21 : 21 + id_length]
        ciphertext = body[21 + id_length :]
        assert len(ciphertext) <= record_size
        sender = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), sender_public)
        shared = self.private_key.exchange(ec.ECDH(), sender)
        info = b"WebPush: info\x00" + self.public_bytes + sender_public
        ikm = _hkdf(self.auth, shared, info, 32)
        key = _hkdf(salt, ikm, b"Content-Encoding: aes128gcm\x00", 16)
        nonce = _hkdf(salt, ikm, b"Content-Encoding: nonce\x00", 12)
        padded = AESGCM(key).decrypt(nonce, ciphertext, None)
        content = padded.rstrip(b"\x00")
        assert content.endswith(b"\x02")  # the last record's delimiter
        return content[:-1]


def _hkdf(salt: bytes, ikm: bytes, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


def verify_es256(token: str, public_key: ec.EllipticCurvePublicKey) -> tuple[dict, dict]:
    """A JWT's header and claims once its ES256 signature (r || s, RFC 7518 3.4) verifies."""

    header, claims, signature = token.split(".")
    raw = unb64url(signature)
    assert len(raw) == 64
    der = encode_dss_signature(int.from_bytes(raw[:32]), int.from_bytes(raw[32:]))
    public_key.verify(der, f"{header}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))
    return json.loads(unb64url(header)), json.loads(unb64url(claims))
