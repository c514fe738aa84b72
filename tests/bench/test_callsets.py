from bench import callsets


def _run(gpus: int, by_symbol: dict[str, float], by_argument: dict[str, float] | None = None,
         missing: dict[str, float] | None = None) -> dict[str, object]:
    return {"gpus": gpus, "idle": {"calls_per_cycle_by_symbol": by_symbol,
                                   "calls_per_cycle_by_argument": by_argument or {},
                                   "missing_calls_per_cycle_by_symbol": missing or {}}}


def test_calls_are_per_gpu_and_split_by_argument_when_the_probe_keyed_them():
    run = _run(2, {"nvmlDeviceGetClockInfo": 4, "nvmlDeviceGetPowerUsage": 2},
               {"nvmlDeviceGetClockInfo[1]": 2, "nvmlDeviceGetClockInfo[2]": 2},
               missing={"nvmlDeviceGetJpgUtilization": 2})
    assert callsets.calls_per_gpu(run) == {"nvmlDeviceGetClockInfo[1]": 1.0, "nvmlDeviceGetClockInfo[2]": 1.0,
                                           "nvmlDeviceGetPowerUsage": 1.0, "nvmlDeviceGetJpgUtilization": 1.0}


def test_the_same_rule_on_both_sides_whichever_is_called_ours():
    ours = _run(1, {"nvmlGpmSampleGet": 1, "nvmlGpmMetricsGet": 1, "nvmlDeviceGetPowerUsage": 1,
                    "nvmlDeviceGetCurrentClocksEventReasons": 1})
    theirs = _run(1, {"nvmlDeviceGetPcieThroughput": 2, "nvmlDeviceGetPowerUsage": 1, "nvmlDeviceGetFanSpeed": 1},
                  {"nvmlDeviceGetPcieThroughput[0]": 1, "nvmlDeviceGetPcieThroughput[1]": 1})
    forward, backward = callsets.comparison(ours, theirs), callsets.comparison(theirs, ours)
    assert forward["shared_families"] == backward["shared_families"] == ["PCIe bytes", "power"]
    # GPM feeds profiling (one-sided) and PCIe bytes (shared): it counts, as does the peer's PCIe call.
    assert (forward["ours_shared"], forward["theirs_shared"]) == (3.0, 3.0)
    assert (backward["ours_shared"], backward["theirs_shared"]) == (3.0, 3.0)
    assert (forward["ours_all"], forward["theirs_all"]) == (4.0, 4.0)


def test_a_family_one_side_lacks_is_left_out_on_the_side_that_has_it():
    ours = _run(1, {"nvmlGpmSampleGet": 1, "nvmlGpmMetricsGet": 1, "nvmlDeviceGetPowerUsage": 1})
    theirs = _run(1, {"nvmlDeviceGetPowerUsage": 1, "nvmlDeviceGetClockInfo": 2},
                  {"nvmlDeviceGetClockInfo[0]": 1, "nvmlDeviceGetClockInfo[3]": 1})
    result = callsets.comparison(ours, theirs)
    assert result["shared_families"] == ["power"]
    assert (result["ours_shared"], result["theirs_shared"]) == (1.0, 1.0)


def test_an_unknown_symbol_is_its_own_family():
    assert callsets.families_of("nvmlDeviceGetSomethingNew") == frozenset({"nvmlDeviceGetSomethingNew"})
    assert callsets.families_of("nvmlDeviceGetPcieThroughput[1]") == frozenset({"PCIe bytes"})
    assert callsets.families_of("nvmlDeviceGetClockInfo[3]") == frozenset({"video clock"})
