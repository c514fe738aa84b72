from bench.profile import summarise

COLLAPSED = """\
Thread._bootstrap (threading.py:1002);_serve (server.py:238);parse (email/parser.py:56) 6
Thread._bootstrap (threading.py:1002);_serve (server.py:238) 2
Thread._bootstrap (threading.py:1002);run_cycle (sampler.py:274) 2
garbage line without a count
"""


def test_summary_counts_self_and_inclusive_samples_per_frame():
    summary = summarise(COLLAPSED)
    assert summary.startswith("10 samples holding the GIL")
    own, inclusive = summary.split("inclusive:")
    assert "      6  60.0%  parse (email/parser.py:56)" in own
    assert "      2  20.0%  _serve (server.py:238)" in own
    assert "      8  80.0%  _serve (server.py:238)" in inclusive
    assert "     10 100.0%  Thread._bootstrap (threading.py:1002)" in inclusive
