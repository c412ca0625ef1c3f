"""Worker hooks for tests/test_pdf.py: run inside the real PDF worker process (see cairn.vault.pdf.WorkerHook),
they make it hang, crash, run out of memory or write to its own stdout at a given point."""

from __future__ import annotations

import os
import time


def _stall_on(page: int, stage: str, at: int) -> None:
    if stage == "page" and at == page:
        time.sleep(3600)


def stall_on_page_1(stage: str, page: int) -> None:
    _stall_on(1, stage, page)


def stall_on_page_2(stage: str, page: int) -> None:
    _stall_on(2, stage, page)


def stall_on_page_3(stage: str, page: int) -> None:
    _stall_on(3, stage, page)


def crash_while_opening(stage: str, page: int) -> None:
    if stage == "open":
        os._exit(70)


def crash_on_page_4(stage: str, page: int) -> None:
    if stage == "page" and page == 4:
        os._exit(70)


def hog_while_opening(stage: str, page: int) -> None:
    """Try to allocate 8 GiB while opening."""
    if stage == "open":
        bytearray(8 * 1024 * 1024 * 1024)


def shout_while_opening(stage: str, page: int) -> None:
    """What a chatty C library would do: a raw write to descriptor 1, which must not reach the protocol."""
    if stage == "open":
        os.write(1, b"pdf worker: raw write to fd 1\n")
