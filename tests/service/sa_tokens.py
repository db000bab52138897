"""Kubernetes projected service-account tokens made in the test: an issuer's keys (RSA and EC P-256),
its JWKS, and tokens signed with them exactly as the API server signs them (RS256 / ES256 JWTs with a
``kubernetes.io`` claim naming the namespace, the service account, the pod and the node)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

ISSUER = "https://kubernetes.default.svc.cluster.local"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int(value: int, size: int | None = None) -> str:
    size = size or (value.bit_length() + 7) // 8
    return b64url(value.to_bytes(size, "big"))


class Issuer:
    """``Issuer("rsa")`` / ``Issuer("ec")``: a signing key, its JWK and tokens it signs."""

    __test__ = False

    def __init__(self, kind: str = "rsa", kid: str | None = None) -> None:
        self.kind = kind
        self.kid = kid or uuid.uuid4().hex[:12]
        if kind == "rsa":
            self.key: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            numbers = self.key.public_key().public_numbers()
            self.jwk = {"kty": "RSA", "alg": "RS256", "use": "sig", "kid": self.kid, "n": _int(numbers.n),
                        "e": _int(numbers.e)}
        else:
            self.key = ec.generate_private_key(ec.SECP256R1())
            numbers = self.key.public_key().public_numbers()
            self.jwk = {"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": self.kid,
                        "x": _int(numbers.x, 32), "y": _int(numbers.y, 32)}

    def sign(self, claims: dict[str, Any], *, kid: str | None = None) -> str:
        alg = "RS256" if self.kind == "rsa" else "ES256"
        header = {"alg": alg, "kid": self.kid if kid is None else kid}
        signed = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        if self.kind == "rsa":
            signature = self.key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature(self.key.sign(signed.encode(), ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signed}.{b64url(signature)}"

    def token(self, node: str, *, namespace: str = "edgetune", account: str = "edgetune-agent",
              audience: str | list[str] = "edgetune", lifetime_s: float = 3600.0, issued_s: float | None = None,
              issuer: str = ISSUER, **changes: Any) -> str:
        """A projected token of the pod of ``account`` running on ``node`` (as kubelet requests it)."""
        now = time.time() if issued_s is None else issued_s
        claims: dict[str, Any] = {
            "aud": audience if isinstance(audience, list) else [audience], "exp": int(now + lifetime_s),
            "iat": int(now), "nbf": int(now), "iss": issuer, "jti": uuid.uuid4().hex,
            "sub": f"system:serviceaccount:{namespace}:{account}",
            "kubernetes.io": {"namespace": namespace,
                              "node": {"name": node, "uid": str(uuid.uuid4())},
                              "pod": {"name": f"{account}-{uuid.uuid4().hex[:5]}", "uid": str(uuid.uuid4())},
                              "serviceaccount": {"name": account, "uid": str(uuid.uuid4())}},
        }
        claims.update(changes)
        return self.sign(claims)


def write_jwks(path: Path, *issuers: Issuer) -> Path:
    path.write_text(json.dumps({"keys": [i.jwk for i in issuers]}))
    return path
