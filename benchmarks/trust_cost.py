"""What sealing and signing cost: per upload, per broadcast, and a whole server round on SQLite.

Measures, with ``M = 100`` features (the papers' setting):

* per upload, on the participant: sealing (HPKE X25519 / HKDF-SHA256 / ChaCha20-Poly1305) and
  signing (Ed25519) of one upload; on the server: verifying and opening it;
* per broadcast read by a participant: verifying the signed pointer and broadcast;
* one server round at ``N`` participants on a SQLite file (the uploads already written): the
  whole ``step()`` (read, verify, open, parse, aggregate, sign, stage, publish), and the part of
  it spent verifying and opening the ``N`` uploads.

Usage::

    python benchmarks/trust_cost.py            # N = 200 and 1,000
    python benchmarks/trust_cost.py --quick    # N = 50 and 200
"""

from __future__ import annotations

import argparse
from pathlib import Path
import tempfile
import time

import numpy as np
import optuna
from optuna.distributions import FloatDistribution

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.fts.messages import encode_upload

M = 100
SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}


def _median_ms(function, repeats: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def per_message(repeats: int) -> dict[str, float]:
    """Median milliseconds of each cryptographic step on one message."""
    fed = Federation.create("cost", search_space=SPACE, n_clients=2, protocol=FTSConfig())
    fed.join("c0")
    key = fed._participant_key("c0")
    public_key = fed.public_key_of("c0")
    payload = encode_upload(
        config_hash=fed.config_hash,
        round_index=0,
        client_id="c0",
        omega=np.random.default_rng(0).normal(size=M),
        n_observations=10,
        iteration=0,
    )
    sealed = fed.trust.seal_upload(key, 0, 1, payload)
    signed = fed.store.sign_broadcast(0, payload, epoch=1)
    return {
        "seal + sign an upload (participant)": _median_ms(
            lambda: fed.trust.seal_upload(key, 0, 1, payload), repeats
        ),
        "verify + open an upload (server)": _median_ms(
            lambda: fed.trust.open_upload_bytes(
                sealed, client_id="c0", public_key=public_key, round_index=0
            ),
            repeats,
        ),
        "verify a broadcast (participant)": _median_ms(
            lambda: fed.trust.verify("broadcast", signed), repeats
        ),
        "sign a broadcast (server)": _median_ms(
            lambda: fed.store.sign_broadcast(0, payload, epoch=1), repeats
        ),
        "upload size (characters, sealed)": float(len(sealed)),
        "upload size (bytes, plain)": float(len(payload)),
    }


def server_round(n_clients: int, directory: Path) -> dict[str, float]:
    """Seconds of one server round with ``n_clients`` sealed uploads on SQLite."""
    url = f"sqlite:///{directory / f'round-{n_clients}.db'}"
    fed = Federation.create(
        f"round-{n_clients}",
        search_space=SPACE,
        n_clients=n_clients,
        storage=url,
        protocol=FTSConfig(n_features=M, n_init=1, n_subregions=4),
        key_dir=directory / "keys",
    )
    start = time.perf_counter()
    for i in range(n_clients):
        fed.join(f"site-{i}")
    enroll = time.perf_counter() - start
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for i in range(n_clients):
        fed.upload(f"site-{i}", rng.normal(size=M), n_observations=5, iteration=0)
    uploads = time.perf_counter() - start
    server = FederationServer(Federation.load(fed.name, url, key_dir=directory / "keys"))
    raw = fed.store.read_uploads(0)
    keys = {c: fed.public_key_of(c) for c in raw}
    start = time.perf_counter()
    for client, text in raw.items():
        fed.trust.open_upload_bytes(text, client_id=client, public_key=keys[client], round_index=0)
    crypto = time.perf_counter() - start
    start = time.perf_counter()
    report = server.step()
    step = time.perf_counter() - start
    assert report is not None and report.n_contributors == n_clients
    return {
        "enroll (join) per participant, ms": 1e3 * enroll / n_clients,
        "upload per participant, ms (seal + sign + SQLite write)": 1e3 * uploads / n_clients,
        "server round (step), s": step,
        "of which verify + open N uploads, s": crypto,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 50 and 200.")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sizes = (50, 200) if args.quick else (200, 1000)
    print("per message (median of 200, M = 100)")
    for label, value in per_message(200).items():
        unit = "" if "size" in label else " ms"
        print(f"  {label:<48} {value:>10.3f}{unit}")
    with tempfile.TemporaryDirectory() as directory:
        for n_clients in sizes:
            print(f"server round on SQLite, N = {n_clients}")
            for label, value in server_round(n_clients, Path(directory)).items():
                print(f"  {label:<58} {value:>10.3f}")


if __name__ == "__main__":
    main()
