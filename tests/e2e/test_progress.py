"""Long work is not silent: without a terminal, run prints plain progress lines."""

import re


def test_plain_progress_lines_without_a_terminal(emulator, cli, tmp_path):
    p = cli("run", "--url", emulator.base_url, "--concurrency", "2", "--requests", "60", "--output-tokens", "4",
            "--progress-every", "0.3s", "--out", str(tmp_path / "p"))
    assert p.returncode == 0, p.stderr
    lines = [x for x in p.stderr.splitlines() if x.startswith("progress: ")]
    assert len(lines) >= 2, p.stderr  # ~60 x 72 ms / 2 streams = 2.2 s of work
    done = [int(re.match(r"progress: (\d+)/60 done", x).group(1)) for x in lines]
    assert done == sorted(done) and done[-1] > done[0]
    assert all("in flight" in x and "req/s" in x and "errors" in x for x in lines)


def test_no_progress_lines_when_asked(emulator, cli, tmp_path):
    p = cli("run", "--url", emulator.base_url, "--concurrency", "2", "--requests", "20", "--output-tokens", "4",
            "--progress-every", "0", "--out", str(tmp_path / "q"))
    assert p.returncode == 0 and "progress: " not in p.stderr
