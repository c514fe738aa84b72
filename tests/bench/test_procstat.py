import os

import pytest

from bench import procstat

# A real /proc/<pid>/stat line whose command name contains spaces and a closing parenthesis.
STAT = ("4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1391 0 0 0 250 37 0 0 20 0 3 0 "
        "123456 10000000 2000 18446744073709551615 1 1 0 0 0 0 0 16781312 16386 0 0 0 17 1 0 0 0 0 0")


def test_stat_reads_utime_and_stime_after_the_last_parenthesis():
    times = procstat.parse_stat(STAT, ticks_per_s=100)
    assert times.user_s == pytest.approx(2.50)
    assert times.system_s == pytest.approx(0.37)
    assert times.total_s == pytest.approx(2.87)


def test_a_truncated_stat_line_is_an_error_not_zero():
    with pytest.raises(ValueError, match="not a /proc"):
        procstat.parse_stat("4242 (x) S 1 2")


def test_status_memory_in_bytes():
    text = "Name:\tpython3\nVmPeak:\t  900 kB\nVmHWM:\t   40960 kB\nVmRSS:\t   30720 kB\nThreads:\t7\n"
    memory = procstat.parse_status_memory(text)
    assert memory.rss_bytes == 30 * 1024 * 1024
    assert memory.peak_rss_bytes == 40 * 1024 * 1024


def test_status_without_rss_is_an_error():
    with pytest.raises(ValueError, match="VmRSS/VmHWM missing"):
        procstat.parse_status_memory("Name:\tkthreadd\nState:\tS (sleeping)\n")


def test_this_process_has_used_cpu_and_memory():
    sum(range(200_000))
    times = procstat.cpu_times(os.getpid())
    memory = procstat.memory(os.getpid())
    assert times.total_s > 0
    assert 0 < memory.rss_bytes <= memory.peak_rss_bytes
