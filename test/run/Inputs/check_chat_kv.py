"""Checks that a chat kept its KV cache between turns: rebuilds the token
sequence from amk-run -cnv -v's "turn N: ... : ids" and "reply N: ...: ids"
lines (stderr, in FILE), checks that each turn starts where the tokens
before it end, then decodes the whole sequence up to the last turn's end in
one go (--prompt-ids, no chat) and checks that it continues as the last
reply did.

    check_chat_kv.py STDERR_FILE AMK_RUN MODEL [amk-run args...]
"""
import json
import re
import subprocess
import sys

err_file, amk_run, model, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
sequence, kept = [], 0  # kept: tokens the KV cache holds or will hold
last_reply = None
for line in open(err_file, encoding="utf-8"):
    m = re.match(r"amk-run: turn (\d+): (\d+) tokens at positions (\d+)\.\.(\d+) "
                 r"\((\d+) of the reply before, (\d+) of this turn\): ([\d,]+)$", line)
    if m:
        first, last = int(m.group(3)), int(m.group(4))
        ids = [int(x) for x in m.group(7).split(",")]
        before = int(m.group(5))
        # The unfed end of the reply is re-fed, the rest is new.
        if first != len(sequence) - before:
            sys.exit(f"FAIL turn {m.group(1)} starts at {first}, after {len(sequence)} tokens "
                     f"of which {before} were not fed")
        if ids[:before] != sequence[len(sequence) - before:]:
            sys.exit(f"FAIL turn {m.group(1)} re-feeds {ids[:before]}, not the reply's end")
        sequence += ids[before:]
        if last != len(sequence) - 1:
            sys.exit(f"FAIL turn {m.group(1)} ends at {last}, not {len(sequence) - 1}")
        continue
    m = re.match(r"amk-run: reply (\d+): (\d+) tokens at positions (\d+)\.\.(-?\d+), "
                 r"ended by .*: ([\d,]*)$", line)
    if m:
        ids = [int(x) for x in m.group(5).split(",") if x]
        if int(m.group(3)) != len(sequence):
            sys.exit(f"FAIL reply {m.group(1)} starts at {m.group(3)}, not {len(sequence)}")
        prompt = list(sequence)
        sequence += ids
        last_reply = (prompt, ids)
if last_reply is None:
    sys.exit("FAIL no reply in " + err_file)
prompt, reply = last_reply
cmd = [amk_run, model, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(len(reply)),
       "--json", "--ignore-eos"] + extra
out = subprocess.run(cmd, capture_output=True, text=True)
if out.returncode:
    sys.exit("FAIL " + " ".join(cmd) + "\n" + out.stderr)
generated = json.loads(out.stdout)["generated"]
if generated != reply:
    sys.exit(f"FAIL the last reply {reply}; one decode of the same {len(prompt)} tokens "
             f"gives {generated}")
print(f"PASS {len(prompt)} tokens over the turns; the last reply as one decode gives it")
