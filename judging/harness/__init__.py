"""Trusted scripts shipped into every sandbox job, and the value codec they share.

`harness.py` runs the tests and writes the report, `workers.py` starts, asks and reclaims its
workers (the report descriptor too), `channel.py` is its handle on one worker,
`proxy.py` stands in for the candidate inside test code, `worker.py` hosts the candidate (or
the reference) in a process of its own, `wire.py` encodes values between them, `mutate.py`
makes robustness inputs and `checks.py` splits HumanEval-style `check` functions into
counted tests. Inside the sandbox they are plain files run with `python3 -I -S`; the judge
imports `wire` and `checks` from here, so both sides agree on encodings and test counts.
Nothing here imports whetstone.
"""
