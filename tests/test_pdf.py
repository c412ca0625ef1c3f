"""PDF text extraction (cairn.vault.pdf): real PDFs written by tests/support/pdfgen.py, read by the real pypdfium2
in the real worker subprocess. The time-limit, crash and memory tests give the extractor a worker hook
(tests/support/pdf_worker_hooks.py, run inside the worker process) instead of sleeping here."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from cairn.errors import NoteReadError, PdfReadError
from cairn.vault.pdf import PdfExtractor
from cairn.vault.pdf_text import RawLine, RawPage, format_pages, tidy_pages
from support import pdf_worker_hooks as hooks
from support import pdfgen
from support.waits import wait_until

pytestmark = pytest.mark.timeout(60)

HEADER = "Cairn Field Guide"


@pytest.fixture(scope="module")
def pdfs(tmp_path_factory):
    """Every kind of test PDF, written once for the module."""
    d = tmp_path_factory.mktemp("pdfs")
    return {
        "five": pdfgen.text_pdf(
            d / "five.pdf", pdfgen.numbered_pages(5, headings=True), title="Five Pages", running_header=HEADER
        ),
        "plain": pdfgen.text_pdf(d / "plain.pdf", pdfgen.numbered_pages(3)),
        "encrypted": pdfgen.encrypted_pdf(d / "encrypted.pdf"),
        "owner_only": pdfgen.owner_only_encrypted_pdf(d / "owner.pdf"),
        "images": pdfgen.image_only_pdf(d / "images.pdf", pages=3),
        "mixed": pdfgen.mixed_pdf(d / "mixed.pdf"),
        "truncated": pdfgen.truncated_pdf(d / "truncated.pdf"),
        "broken_xref": pdfgen.broken_xref_pdf(d / "broken_xref.pdf"),
        "not_pdf": pdfgen.not_a_pdf(d / "notes.pdf"),
    }


@pytest.fixture(scope="module")
def extractor():
    with PdfExtractor() as ex:
        yield ex


def test_each_page_comes_back_with_its_1_based_number_and_only_its_own_text(extractor, pdfs):
    result = extractor.extract(pdfs["five"])
    assert result.page_count == 5
    assert [p.number for p in result.pages] == [1, 2, 3, 4, 5]
    page3 = result.pages[2].text
    assert pdfgen.page_sentence(3) in page3
    assert pdfgen.page_sentence(2) not in page3 and pdfgen.page_sentence(4) not in page3
    assert result.title == "Five Pages"
    assert result.problems == ()


def test_running_header_and_page_n_of_m_footer_are_removed_and_never_a_heading(extractor, pdfs):
    result = extractor.extract(pdfs["five"])
    for page in result.pages:
        assert HEADER not in page.text
        assert f"Page {page.number} of 5" not in page.text
        assert page.heading != HEADER
        assert pdfgen.page_sentence(page.number) in page.text  # the body itself stays


def test_numbered_section_headings_are_found_on_their_pages(extractor, pdfs):
    result = extractor.extract(pdfs["five"])
    assert [p.heading for p in result.pages] == [
        f"{n}. Section {w}" for n, w in [(1, "Basalt"), (2, "Cobalt"), (3, "Dolomite"), (4, "Emerald"), (5, "Feldspar")]
    ]


def test_headings_in_several_styles_are_found_and_a_page_without_one_has_none(extractor, tmp_path):
    styles = ["Chapter 4 Installation", "3.2 Results", "INTRODUCTION", "Getting Started With Cairns"]
    pages = [(h, f"{pdfgen.page_sentence(n)}\n\n{pdfgen.prose(n)}") for n, h in enumerate(styles, 1)]
    pages.append(f"{pdfgen.page_sentence(5)} {pdfgen.prose(5)}")  # body only
    result = extractor.extract(pdfgen.text_pdf(tmp_path / "styles.pdf", pages))
    assert [p.heading for p in result.pages] == [*styles, None]


def test_paragraphs_are_separated_by_a_blank_line_and_hyphenated_words_rejoined(extractor, tmp_path):
    body = "First paragraph about the extrac-\ntion of text from cairns.\n\nSecond paragraph, which starts after a gap."
    result = extractor.extract(pdfgen.text_pdf(tmp_path / "para.pdf", [body]))
    text = result.pages[0].text
    assert "extraction of text" in text.replace("\n", " ")
    assert "extrac-" not in text
    assert "cairns.\n\nSecond paragraph" in text


def test_tidying_spells_out_ligatures_composes_nfc_and_drops_page_numbers_at_the_edges():
    words = ["amber", "basalt", "cobalt", "dolomite"]
    raw = [
        RawPage(
            n,
            (
                RawLine(f"- {n} -" if n % 2 else ["iv", "v", "vi", "vii"][n - 4], 10.0, 9.0),
                RawLine(
                    f"Cafe\u0301 \ufb01ndings on the e\ufb00ect of cai\ufffern stacking in {words[n - 4]}", 40.0, 11.0
                ),
                RawLine(f"Page {n}", 800.0, 9.0),
            ),
            842.0,
        )
        for n in range(4, 8)
    ]
    pages = tidy_pages(raw)
    assert [p.text for p in pages] == [f"Café findings on the effect of cairn stacking in {w}" for w in words]
    assert [p.heading for p in pages] == [None] * 4


@pytest.mark.skipif(not pdfgen.DEJAVU.exists(), reason="needs the DejaVu Sans font to write Unicode text")
def test_decomposed_accents_come_back_composed_and_ligatures_spelled_out(extractor, tmp_path):
    text = "The \ufb01eld o\ufb03ce found a cafe\u0301 in Zu\u0308rich; \u041a\u0430\u043c\u0435\u043d\u044c is stone."
    result = extractor.extract(pdfgen.unicode_pdf(tmp_path / "unicode.pdf", [text]))
    assert (
        result.pages[0].text
        == "The field office found a caf\u00e9 in Z\u00fcrich; \u041a\u0430\u043c\u0435\u043d\u044c is stone."
    )


def test_encrypted_pdf_is_refused_with_a_message_about_the_password(extractor, pdfs):
    with pytest.raises(PdfReadError) as info:
        extractor.extract(pdfs["encrypted"])
    assert info.value.message == "encrypted: needs a password; Cairn cannot index it"
    assert isinstance(info.value, NoteReadError) and info.value.code == "pdf_unreadable"


def test_owner_password_only_pdf_is_indexed_like_any_other(extractor, pdfs):
    result = extractor.extract(pdfs["owner_only"])
    assert [p.number for p in result.pages] == [1, 2]
    assert pdfgen.page_sentence(2) in result.pages[1].text
    assert result.problems == ()


def test_image_only_pdf_is_refused_as_having_no_text_layer(extractor, pdfs):
    with pytest.raises(
        PdfReadError,
        match=r"^no text layer on any of the 3 pages \(scanned images\?\); "
        r"OCR is not supported$",
    ):
        extractor.extract(pdfs["images"])


def test_mixed_pdf_keeps_the_text_pages_and_names_the_image_only_ones(extractor, pdfs):
    result = extractor.extract(pdfs["mixed"])
    assert [p.number for p in result.pages] == [1, 2, 3, 4, 5, 6]
    for page in result.pages:
        if page.number in pdfgen.MIXED_IMAGE_PAGES:
            assert page.text == ""
        else:
            assert pdfgen.page_sentence(page.number) in page.text
    assert result.problems == ("pages 2, 4–5 have no text layer (scanned images?); OCR is not supported",)


def test_truncated_pdf_is_refused_as_damaged_and_the_next_file_still_works(extractor, pdfs):
    with pytest.raises(PdfReadError, match=r"^cannot open: damaged or truncated PDF \(PDFium: .+\)$"):
        extractor.extract(pdfs["truncated"])
    assert pdfgen.page_sentence(1) in extractor.extract(pdfs["plain"]).pages[0].text


def test_a_broken_xref_table_is_rebuilt_and_every_page_read(extractor, pdfs):
    result = extractor.extract(pdfs["broken_xref"])
    assert [pdfgen.page_sentence(n) in p.text for n, p in enumerate(result.pages, 1)] == [True, True, True]


def test_a_text_file_named_pdf_is_refused_as_not_a_pdf(extractor, pdfs):
    with pytest.raises(PdfReadError, match=r"^not a PDF: the file holds text, not a PDF header") as raised:
        extractor.extract(pdfs["not_pdf"])
    assert "Meeting" not in raised.value.message  # the reason is logged and shown: it never quotes the file


def test_a_file_over_max_bytes_is_refused_with_both_sizes(pdfs):
    size = pdfs["five"].stat().st_size
    with PdfExtractor(max_bytes=1000) as ex:
        with pytest.raises(PdfReadError) as info:
            ex.extract(pdfs["five"])
        assert ex.worker_pid is None  # refused before any worker was needed
    assert info.value.message.startswith(f"too big: {size / 1024:.1f} KB, over pdf_max_bytes 1000 bytes")


def test_page_limit_keeps_the_first_pages_and_names_the_rest(pdfs):
    with PdfExtractor(max_pages=2) as ex:
        result = ex.extract(pdfs["five"])
    assert [p.number for p in result.pages] == [1, 2]
    assert result.page_count == 5
    assert result.problems == (
        "page limit 2 reached: pages 3–5 not indexed (raise pdf_max_pages in the config to index them)",
    )


def test_time_limit_keeps_the_pages_read_so_far_and_a_fresh_worker_reads_the_next_file(pdfs):
    with PdfExtractor(timeout_s=1.0, worker_hook=hooks.stall_on_page_3) as ex:  # the worker hangs on page 3
        result = ex.extract(pdfs["five"])
        first_pid = ex.workers_started
        assert [p.number for p in result.pages] == [1, 2]
        assert result.problems == (
            "time limit 1 s reached: pages 3–5 not indexed (raise pdf_timeout_s in the config to index them)",
        )
        assert ex.worker_pid is None  # the hung worker was killed
        ex.worker_hook = None
        again = ex.extract(pdfs["five"])
        assert [p.number for p in again.pages] == [1, 2, 3, 4, 5]
        assert ex.workers_started == first_pid + 1


def test_time_limit_before_the_first_page_refuses_the_file(pdfs):
    with PdfExtractor(timeout_s=0.5, worker_hook=hooks.stall_on_page_1) as ex:
        with pytest.raises(PdfReadError, match=r"^time limit 0.5 s reached before the first page was read"):
            ex.extract(pdfs["plain"])


def test_a_worker_crash_while_opening_refuses_the_file_and_the_next_file_works(pdfs):
    with PdfExtractor(worker_hook=hooks.crash_while_opening) as ex:
        with pytest.raises(
            PdfReadError,
            match=r"^the PDF reader crashed while opening the file \(it exited with "
            r"code 70\)",
        ):
            ex.extract(pdfs["plain"])
        ex.worker_hook = None
        assert pdfgen.page_sentence(3) in ex.extract(pdfs["plain"]).pages[2].text


def test_a_worker_crash_part_way_keeps_the_pages_read_before_it(pdfs):
    with PdfExtractor(worker_hook=hooks.crash_on_page_4) as ex:
        result = ex.extract(pdfs["five"])
    assert [p.number for p in result.pages] == [1, 2, 3]
    assert result.problems == ("the PDF reader crashed on page 4 (it exited with code 70): pages 4–5 not indexed",)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux only")
def test_a_memory_bomb_fails_that_file_only(pdfs):
    # the worker tries to allocate 8 GiB
    with PdfExtractor(memory_limit_bytes=1024 * 1024 * 1024, worker_hook=hooks.hog_while_opening) as ex:
        with pytest.raises(PdfReadError, match=r"memory limit \(1024 MB\)"):
            ex.extract(pdfs["plain"])
        ex.worker_hook = None
        assert len(ex.extract(pdfs["plain"]).pages) == 3


def test_nothing_reaches_the_parents_stdout_even_when_the_worker_writes_to_its_own(pdfs, capfd):
    with PdfExtractor(worker_hook=hooks.shout_while_opening) as ex:
        result = ex.extract(pdfs["plain"])
        with pytest.raises(PdfReadError):
            ex.extract(pdfs["encrypted"])
    out, err = capfd.readouterr()
    assert out == ""
    assert "pdf worker: raw write to fd 1" in err  # it went to stderr, not into the protocol
    assert len(result.pages) == 3


def test_two_threads_extracting_at_once_each_get_their_own_file(extractor, pdfs):
    results: dict[str, object] = {}

    def run(name):
        results[name] = extractor.extract(pdfs[name])

    threads = [threading.Thread(target=run, args=(name,)) for name in ("five", "plain", "owner_only")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [results[n].page_count for n in ("five", "plain", "owner_only")] == [5, 3, 2]
    assert pdfgen.page_sentence(2) in results["owner_only"].pages[1].text


def test_close_stops_the_worker_process(pdfs):
    ex = PdfExtractor()
    ex.extract(pdfs["plain"])
    pid = ex.worker_pid
    assert pid is not None
    ex.close()
    assert ex.worker_pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_close_from_another_thread_ends_an_extraction_under_way_at_once(pdfs):
    ex = PdfExtractor(timeout_s=60, worker_hook=hooks.stall_on_page_2)
    outcome: list[BaseException | object] = []

    def run():
        try:
            outcome.append(ex.extract(pdfs["five"]))
        except BaseException as exc:  # noqa: BLE001 — handed to the test thread
            outcome.append(exc)

    worker_thread = threading.Thread(target=run)
    worker_thread.start()
    wait_until("the extraction under way with its worker", lambda: ex.busy and ex.worker_pid, 20, interval_s=0.01)
    ex.close()
    worker_thread.join(10)  # the worker hangs on page 2 for an hour and timeout_s is 60: only close() ends it
    assert not worker_thread.is_alive()
    assert isinstance(outcome[0], PdfReadError)
    assert outcome[0].message == "stopped: the PDF reader was closed while reading this file"


def test_a_worker_is_replaced_by_a_fresh_one_after_its_quota_of_files(pdfs):
    with PdfExtractor(files_per_worker=2) as ex:
        pids = []
        for _ in range(3):
            assert len(ex.extract(pdfs["plain"]).pages) == 3
            pids.append(ex.worker_pid)
    assert pids[0] == pids[1] != pids[2]
    assert ex.workers_started == 2


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads process states from /proc")
def test_a_worker_stuck_on_a_file_exits_when_its_daemon_is_killed(pdfs, tmp_path):
    pid_file = tmp_path / "worker.pid"
    script = (
        "import sys, threading\n"
        "from pathlib import Path\n"
        "sys.path.insert(0, sys.argv[3])\n"
        "import pdf_worker_hooks\n"
        "from cairn.vault.pdf import PdfExtractor\n"
        "ex = PdfExtractor(timeout_s=600, worker_hook=pdf_worker_hooks.stall_on_page_1)\n"
        "def report():\n"
        "    while not ex.worker_pid: threading.Event().wait(0.01)\n"
        "    Path(sys.argv[2]).write_text(str(ex.worker_pid))\n"
        "threading.Thread(target=report, daemon=True).start()\n"
        "ex.extract(Path(sys.argv[1]))\n"
    )
    # the worker hangs on page 1 for an hour
    args = [sys.executable, "-c", script, str(pdfs["plain"]), str(pid_file), os.path.dirname(hooks.__file__)]
    daemon = subprocess.Popen(args)
    try:
        wait_until("the worker's pid", lambda: pid_file.exists() and pid_file.read_text(), 20)
        worker_pid = int(pid_file.read_text())
        assert _running(worker_pid)
    finally:
        daemon.kill()  # SIGKILL: no finalizer, no close(), the worker's stdin stays open while it hangs
        daemon.wait()
    wait_until("the orphaned worker to exit", lambda: not _running(worker_pid), 10)  # it notices within ~1 s


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (exited, waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(") ")[2][:1] != "Z"
    except FileNotFoundError:
        return False


def test_page_lists_are_named_as_ranges():
    assert format_pages([4, 7, 8, 9]) == "pages 4, 7–9"
    assert format_pages([3]) == "page 3"
