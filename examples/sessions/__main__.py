"""Three replicas over one SQLite file and nothing else: no channel, no lock, no Run shared.

    python examples/sessions [--model PROVIDER:MODEL] [--base-url URL] [--db PATH]

PROVIDER is anthropic, openai or openai-responses.

Each replica is its own OS process (replica.py). Every figure printed is read back from
the store; the example exits non-zero if any is not what the Sessions guide promises.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import replica  # noqa: E402  (a sibling file, found through the path set above)

import agentsessions as agent  # noqa: E402
from agentsessions.stores import sqlite  # noqa: E402

SESSION = "conversation-1"


def _replica(role: str, db: str, model: list[str]) -> dict[str, Any]:
    command = [sys.executable, str(HERE / "replica.py"), role, db, SESSION, *model]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"replica {role} failed:\n{done.stderr}")
    return json.loads(done.stdout) if done.stdout else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="anthropic:, openai: or openai-responses:MODEL; offline without")
    parser.add_argument("--base-url", default="", help="the provider's address, for a gateway or a compatible server")
    parser.add_argument("--db", default="", help="the SQLite file (a fresh temporary one by default)")
    args = parser.parse_args()
    model = ["--model", args.model, "--base-url", args.base_url] if args.model else []
    db = args.db or str(Path(tempfile.mkdtemp(prefix="agentsessions-")) / "sessions.db")
    failures: list[str] = []

    def expect(ok: bool, what: str) -> None:
        if not ok:
            failures.append(what)

    _replica("B", db, model)
    a = _replica("A", db, model)
    store = sqlite.open(db)
    after_a = store.messages(SESSION)
    steps = sum(m.role is agent.Role.ASSISTANT for m in after_a)  # one model reply per step
    steer_at = next((i for i, m in enumerate(after_a) if m.text == replica.STEER), -1)
    c = _replica("C", db, model)
    after_c = store.messages(SESSION)
    left = store.take_steers(SESSION)

    expect(steps == a["steps"], f"the store holds a reply for each of A's {a['steps']} steps (found {steps})")
    expect(steer_at == 0, f"the steer is message 0 of A's transcript (found at {steer_at})")
    expect(after_c[: len(after_a)] == after_a, "C's transcript starts with the messages A saved")
    expect(after_c[len(after_a)].text == replica.QUESTION, "C's first new message is the new question")
    expect(after_c[-1].text == c["text"] and bool(c["text"]), "C's answer is the last stored message")
    expect(not left, f"no steer is left in the store (found {len(left)})")
    if not args.model:  # a real model may take another path; the scripted one must take this one
        expect(steps == 2 and len(after_a) == 4, f"A ran 2 steps into 4 messages ({steps}, {len(after_a)})")

    answer = textwrap.shorten(after_c[-1].text, 100, placeholder="…")
    print(f"replica B   left a steer in {Path(db).resolve()}, holding no run — there was none yet")
    print(f"replica A   ran {steps} steps and was never told replica B existed")
    print(f"transcript  {len(after_a)} messages, and the steer is message {steer_at} of them")
    print(f"replica C   resumed from {len(after_a)} messages it never produced, and answered")
    print(f'            "{answer}"')
    print(f"steers      {len(left)} left in the store: it was handed over exactly once")
    print(f"the store   agentsessions show --store sqlite:///{Path(db).resolve()} {SESSION}")
    for failure in failures:
        print(f"NOT AS PROMISED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
