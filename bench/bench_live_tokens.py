"""From a streamed model token to `wfrun logs --follow` (issue 40): the latency of live
tokens of an `openai` agent step.

    .venv/bin/python bench/bench_live_tokens.py            # 20 tokens, 0.2 s apart
    .venv/bin/python bench/bench_live_tokens.py --smoke    # 5 tokens, 0.05 s apart

The fake OpenAI-compatible server of the tests (tests/fakes/openai_server.py, a real
HTTP server on 127.0.0.1) streams an answer whose text is one line per chunk; a real
`wfrun run --agent openai` process runs the step, and a real `wfrun logs RUN NODE
--follow` process prints the lines. For each line: the time from the server writing
its chunk to the follower printing it (both clocks are this machine's monotonic
clock, read in this process). Printed: median, 90th percentile and the largest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from benchkit import machine  # noqa: E402
from fakes import openai_server as fake  # noqa: E402

WORKFLOW = """\
start: talk
nodes:
  talk:
    agent:
      prompt: "Say something"
      output: {type: object, required: [said], properties: {said: {type: string}}}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    tokens, gap = (5, 0.05) if args.smoke else (20, 0.2)
    sent: dict[str, float] = {}
    original = fake._Handler._event

    def event(self: Any, doc: dict[str, Any]) -> None:
        original(self, doc)
        choices = doc.get("choices") or [{}]
        text = (choices[0].get("delta") or {}).get("content")
        if text:
            sent[text.strip()] = time.monotonic()  # written and flushed: on its way

    fake._Handler._event = event  # type: ignore[method-assign]
    # Each chunk is one 6-character piece: `t0001\n`.
    text = "".join(f"t{i:04d}\n" for i in range(tokens))

    def script(messages: fake.Messages) -> fake.Reply:
        if fake.tool_results(messages):
            return fake.Answer(text="Submitted.")
        contract = fake.contract_of(messages)
        assert contract is not None
        return fake.Answer(text=text, calls=[fake.call("submit", contract,
                                                       output={"said": "done"})])

    server = fake.FakeOpenAI(script, delay=gap).start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
            latencies = measure(Path(tmp), server.base_url, tokens, sent)
    finally:
        server.stop()
    ms = sorted(x * 1000 for x in latencies)
    print(f"machine: {machine()}")
    print(f"{tokens} streamed tokens {gap} s apart, seen by `wfrun logs --follow`: "
          f"{len(ms)} of {tokens}")
    if ms:
        p90 = ms[min(int(len(ms) * 0.9), len(ms) - 1)]
        print(f"token -> follower latency: median {statistics.median(ms):.0f} ms, "
              f"p90 {p90:.0f} ms, max {ms[-1]:.0f} ms")


def measure(project: Path, base_url: str, tokens: int, sent: dict[str, float]) -> list[float]:
    (project / ".wfrun" / "workflows").mkdir(parents=True)
    (project / ".wfrun" / "workflows" / "live.yaml").write_text(WORKFLOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    env["WFRUN_OPENAI_API_KEY"] = "sk-bench"
    argv = [sys.executable, "-m", "runner", "--project", str(project)]
    runner = subprocess.Popen([*argv, "--openai-base-url", base_url, "--openai-model", "m",
                               "run", "live", "--agent", "openai", "-q"], cwd=project,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: dict[str, float] = {}
    try:
        end = time.monotonic() + 60
        while not (found := sorted((project / ".wfrun" / "runs").glob("*/logs/talk.*"))):
            if time.monotonic() > end or runner.poll() is not None:
                sys.exit("the step's live log never appeared")
            time.sleep(0.005)
        run_id = found[0].parent.parent.name
        follower = subprocess.Popen([*argv, "logs", run_id, "talk", "--follow"], cwd=project,
                                    env=env, text=True, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL)
        assert follower.stdout is not None

        def read() -> None:
            assert follower.stdout is not None
            for line in follower.stdout:
                seen.setdefault(line.strip(), time.monotonic())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        follower.wait(timeout=120)
        reader.join(10)
        runner.wait(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    return [seen[k] - sent[k] for k in (f"t{i:04d}" for i in range(tokens))
            if k in seen and k in sent]


if __name__ == "__main__":
    main()
