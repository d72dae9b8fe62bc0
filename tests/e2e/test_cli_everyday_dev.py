"""Issue 13 item 8: `wfrun dev` prints one save's diagnostics once, even when a later
batch (another file saved) re-checks the invalid workflow."""

from __future__ import annotations

import textwrap
from pathlib import Path

from test_cli_dev import BROKEN, FLOW, DevProcess, save


def test_one_saves_diagnostics_are_printed_once(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    folder = root / ".wfrun" / "workflows"
    folder.mkdir(parents=True)
    (folder / "flow.yaml").write_text(textwrap.dedent(FLOW))
    dev = DevProcess(root)
    try:
        dev.expect("out", r"^ok flow sha256:")
        dev.expect("err", r"^watching ")
        save(folder / "flow.yaml", BROKEN)
        dev.expect("err", r"flow\.yaml:5:.*error\[unknown-node\]")
        save(folder / "other.yaml", FLOW)  # a second batch: flow is re-checked
        dev.expect("out", r"^ok other sha256:")
        save(folder / "other.yaml", FLOW.replace("20 + 22", "1 + 1"))  # and a third
        dev.expect("out", r"^ok other sha256:")
        save(folder / "flow.yaml", BROKEN.replace("nowhere", "elsewhere"))  # news again
        dev.expect("err", r"flow\.yaml:5:.*elsewhere")
    finally:
        code, rest = dev.stop()
    assert code == 0
    errors = [line for stream, line in dev.seen + rest
              if stream == "err" and "error[unknown-node]" in line]
    assert len(errors) == 2, errors  # one per distinct save, none repeated
