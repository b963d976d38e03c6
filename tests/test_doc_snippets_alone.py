"""README.md's and docs/' snippets that need a web or a store of their own (web tier).

- the README's real-web quickstart runs unchanged inside the named-host HTTPS web's mount
  namespace, with its DNS server and CA (issue 28; root);
- real-web-testing.md's Python and shell lines, with 8 hosts for 15 s (root);
- incremental.md's measurements at 2-10 K URLs.

Their keys are in tests/support/doc_snippets.py with the others; tests/test_doc_snippets.py
checks that every snippet is run by one of the two modules or marked.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from tests.support.doc_snippets import (GENERATE_FIGURES, GENERATE_PROFILE, GENERATE_PROFILE_NOW, INCREMENTAL_FIGURES, PAGE_CHECK_AB,
                                        PAGE_CHECK_FIGURES, README_REAL_WEB, REALWEB_PY, REALWEB_SH, SAME_SEGMENT, fetched_https, filled, folder_env, one,
                                        quickstart_config, require_namespace, run_script, updated_segments,
                                        venv_bin, wait_until)
from tests.support.snippets import ROOT


@pytest.mark.web
def test_the_readme_quickstart_crawls_the_real_web_namespace(tmp_path):
    from testweb.namespace import namespace_available
    from testweb.realweb import RealWeb

    if namespace_available() is not None:
        pytest.skip(namespace_available())
    pytest.importorskip("matplotlib", reason="crawl report needs the report extra (.ci/run installs it)")
    if not (venv_bin() / "crawl").exists():
        pytest.skip(f"no crawl command in {venv_bin()}: pip install -e .")
    lines = one(README_REAL_WEB).commands()
    assert [words[:2] for words in lines] == [[".venv/bin/crawl", "inject"], [".venv/bin/crawl", "--config"],
                                              [".venv/bin/crawl", "status"], [".venv/bin/crawl", "report"]]
    (tmp_path / ".venv").symlink_to(venv_bin().parent)
    quickstart_config(tmp_path)
    env = folder_env(tmp_path, None)
    with RealWeb(hosts=12, pages=6, page_bytes=3000, special=False, max_seconds=600) as real:
        bad = real.bad_tls_hosts()
        seeds = real.web.seeds()
        seeds += [real.web.url(name) for name in bad if all(f"//{name}" not in s for s in seeds)]
        seeds += real.failing_urls(1)
        (tmp_path / "seeds.txt").write_text("\n".join(seeds) + "\n")
        results = []
        for number, words in enumerate(lines):
            # Output to files, not pipes: the run's worker processes hold what they inherit.
            out_path, err_path = tmp_path / f"{number}.out", tmp_path / f"{number}.err"
            with open(out_path, "w") as out, open(err_path, "w") as err:
                proc = subprocess.Popen(real.prefix + words, cwd=tmp_path, env=env, stdout=out, stderr=err)
                try:
                    if "run" in words:
                        # An hour as written: stopped by SIGTERM, as an operator stops it, once a cycle is applied.
                        wait_until(proc, lambda: updated_segments(tmp_path) >= 1, 420)
                        proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=300)
                finally:
                    proc.kill()
            results.append((words, proc.returncode, out_path.read_text(), err_path.read_text()))
        requests, queries, handshakes = real.web.requests(), real.dns.queries(), real.web.handshakes()
        names = set(real.web.resolve_map())
        completed_bad = real.completed_to_bad_tls(requests)
    for words, code, out, err in results:
        assert code in ((0, 4) if "run" in words else (0,)) and "Traceback" not in err, (words, err[-3000:])
    assert updated_segments(tmp_path) >= 1
    # What the web saw: its names looked up through its DNS server, robots.txt first, pages over HTTPS.
    asked = {q["name"].rstrip(".").lower() for q in queries}
    assert {url.split("/")[2].split(":")[0] for url in real.web.seeds()} <= asked
    https = [r for r in requests if r.get("scheme") == "https" and r["host"] in names]
    assert any(r["path"] == "/robots.txt" for r in https) and any(r["path"] != "/robots.txt" for r in https)
    # Bad certificates: handshakes were attempted (they could have been accepted), no request completed.
    assert bad and {h.get("sni") for h in handshakes} & set(bad)
    assert completed_bad == 0
    # What was written: the crawl DB knows the pages it fetched, and the report was made.
    import cycles

    crawl = cycles.open(str(tmp_path / "data"))
    fetched = crawl.sql("SELECT count(*) FROM crawldb WHERE status = 'fetched' AND url LIKE 'https://%'").fetchall()
    assert fetched[0][0] >= 1
    assert "fetched" in results[2][2]
    assert (tmp_path / "report" / "index.html").exists()
    shutil.rmtree(tmp_path / "data", ignore_errors=True)



@pytest.mark.web
def test_the_generate_figures_commands_run_on_a_10k_store(tmp_path):
    """incremental.md's generate measurement on a store of 10 K URLs (the doc's is 10 M), built
    first by ``scale --build-only``; both --src folders hold this checkout's cycles package."""
    if not os.access("/usr/bin/time", os.X_OK):
        pytest.skip("GNU time is not installed (.ci/run: apt-get install time)")
    for side in ("before", "after"):
        shutil.copytree(ROOT / "cycles", tmp_path / f"{side}-src" / "cycles")
    build = subprocess.run([sys.executable, "scripts/bench/scale.py", "scale", "--sizes", "10K", "--build-only",
                            "--built", str(tmp_path / "built"), "--root", str(tmp_path / "root")],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    text = filled(GENERATE_FIGURES, built=str(tmp_path / "built" / "10K"), tmp=str(tmp_path))
    (_, compact, _), (_, copy, _), (_, generate, printed) = run_script(text, ROOT, folder_env(tmp_path, None))
    assert (compact, copy, generate) == (0, 0, 0)
    assert "RESULT " in printed, printed[-2000:]



@pytest.mark.web
def test_the_page_check_and_generate_profile_commands_run_on_a_2k_store(tmp_path):
    """incremental.md's page-check and generate-profile measurements on a store of 2 K URLs
    (the doc's 10 M), built first by ``scale --build-only``; "after" holds this checkout's cycles."""
    if not os.access("/usr/bin/time", os.X_OK):
        pytest.skip("GNU time is not installed (.ci/run: apt-get install time)")
    shutil.copytree(ROOT / "cycles", tmp_path / "after-src" / "cycles")
    build = subprocess.run([sys.executable, "scripts/bench/scale.py", "scale", "--sizes", "2K", "--build-only",
                            "--built", str(tmp_path / "built"), "--root", str(tmp_path / "root")],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    store, env = str(tmp_path / "built" / "2K"), folder_env(tmp_path, None)
    (_, code, printed), = run_script(filled(PAGE_CHECK_FIGURES, store=store), ROOT, env)
    assert code == 0 and "verify_parquet_file (stored bytes)" in printed, printed[-2000:]
    results = run_script(filled(PAGE_CHECK_AB, store=store, tmp=str(tmp_path)), ROOT, env)
    assert [code for _, code, _ in results] == [0, 0], results
    assert "RESULT " in results[-1][2], results[-1][2][-2000:]
    results = run_script(filled(GENERATE_PROFILE, store=store, tmp=str(tmp_path)), ROOT, env)
    assert [code for _, code, _ in results] == [0, 0], results
    assert "plan_assignment" in results[-1][2], results[-1][2][-2000:]
    results = run_script(filled(GENERATE_PROFILE_NOW, store=store, tmp=str(tmp_path)), ROOT, env)
    assert [code for _, code, _ in results] == [0, 0], results
    assert "add_all" in results[-1][2], results[-1][2][-2000:]  # the seen-sets' bulk adds, timed


@pytest.mark.web
def test_the_incremental_figures_commands_print_the_table(tmp_path):
    """incremental.md's measurement at 2 K URLs (the doc's 1 M and 10 M; one store built, then reused), "before" being
    this checkout (its HEAD): each run prints bench_scale's table."""
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    results = run_script(filled(INCREMENTAL_FIGURES, tmp=str(tmp_path)), ROOT, folder_env(tmp_path, None))
    assert [code for _, code, _ in results] == [0] * len(results), results
    for line, _, printed in results[3:]:
        assert "generate s" in printed and "update s" in printed and "compact s" in printed, (line, printed[-2000:])
    assert (tmp_path / "built" / "2K").is_dir()
    # The same segment at every size (--links-per-page), from the store just built.
    results = run_script(filled(SAME_SEGMENT, tmp=str(tmp_path)), ROOT, folder_env(tmp_path, None))
    assert [code for _, code, _ in results] == [0, 0], results
    assert all("update s" in printed for _, _, printed in results), results



@pytest.mark.web
def test_the_realweb_python_snippet_crawls_inside_the_namespace(tmp_path):
    """real-web-testing.md's Python: 8 hosts (the doc's 300) and a 15 s run (its 60 s)."""
    require_namespace()
    done = subprocess.run([sys.executable, "-c", filled(REALWEB_PY)], cwd=tmp_path, env=folder_env(tmp_path, None),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert fetched_https(tmp_path) >= 1



@pytest.mark.web
def test_the_realweb_command_crawls_inside_the_namespace(tmp_path):
    """real-web-testing.md's shell line, as root without sudo: 8 hosts of 5 pages, a 15 s run."""
    require_namespace()
    (tmp_path / ".venv").symlink_to(venv_bin().parent)
    (_, code, _), = run_script(filled(REALWEB_SH), tmp_path, folder_env(tmp_path, None))
    assert code == 0
    seeds = (tmp_path / "seeds.txt").read_text().split()
    assert any(s.startswith("https://") for s in seeds) and fetched_https(tmp_path) >= 1

