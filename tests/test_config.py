"""Configuration precedence and the one-line errors users see for bad input."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.config import OPTIONS, Config, ConfigError, load_config
from exporter.options import TeamSource, declared_options, positive_int, setting


def test_defaults_match_dcgm_exporter_where_the_concept_matches() -> None:
    config = load_config([], {})
    assert config.address == ":9400"
    assert config.kubernetes is False
    assert config.kubernetes_gpu_id_type == "uid"
    assert config.pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert config.xid_count_window_ms == 300000
    assert config.collect_interval_ms == 1000


def test_flags_win_over_environment_which_wins_over_the_file(tmp_path: Path) -> None:
    config_file = tmp_path / "exporter.yaml"
    config_file.write_text("collect-interval: 3000\naddress: ':9500'\nkubernetes: true\nlog-format: json\n")
    env = {"DCGM_EXPORTER_INTERVAL": "2000", "DCGM_EXPORTER_LISTEN": ":9600",
           "DCGM_EXPORTER_CONFIG_FILE": str(config_file)}
    config = load_config(["-c", "1500"], env)
    assert config.collect_interval_ms == 1500  # flag
    assert config.address == ":9600"  # environment over file
    assert config.kubernetes is True  # file over default
    assert config.log_format == "json"
    assert config.sources["collect_interval_ms"] == "flag --collect-interval"
    assert config.sources["address"] == "environment variable DCGM_EXPORTER_LISTEN"
    assert config.sources["kubernetes"] == f"{config_file}:3"


def test_switch_flags_take_no_value_but_accept_one() -> None:
    assert load_config(["-k"], {}).kubernetes is True
    assert load_config(["--kubernetes", "false"], {}).kubernetes is False
    assert load_config([], {"DCGM_EXPORTER_KUBERNETES": "true"}).kubernetes is True


def test_lists_and_regexes_parse_from_comma_separated_text_and_yaml_lists(tmp_path: Path) -> None:
    config = load_config(["--nvidia-resource-names", "nvidia.com/gpu.shared, nvidia.com/a100"], {})
    assert config.nvidia_resource_names == ("nvidia.com/gpu.shared", "nvidia.com/a100")
    config_file = tmp_path / "c.yaml"
    config_file.write_text("kubernetes-pod-label-allowlist-regex: ['^app$', 'team']\n")
    assert load_config(["--config-file", str(config_file)], {}).kubernetes_pod_label_allowlist_regex == (
        "^app$", "team")


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["-c", "abc"], {}, "flag --collect-interval: collect-interval: invalid value 'abc'"),
        ([], {"DCGM_EXPORTER_INTERVAL": "50"}, "environment variable DCGM_EXPORTER_INTERVAL: collect-interval:"),
        (["--kubernetes-gpu-id-type", "serial"], {}, "kubernetes-gpu-id-type: invalid value 'serial'"),
        (["-a", "9400"], {}, "flag --address: address: invalid listen address '9400'"),
        (["--log-format", "xml"], {}, "flag --log-format: log-format: invalid value 'xml'"),
        (["--kubernetes-pod-label-allowlist-regex", "a(b"], {}, "invalid regular expression 'a(b'"),
        (["--no-such-flag"], {}, "command line: arguments: unrecognized arguments: --no-such-flag"),
    ],
)
def test_bad_values_name_their_source_and_key(argv: list[str], env: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(argv, env)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_yaml_errors_name_the_file_line_and_key(tmp_path: Path) -> None:
    config_file = tmp_path / "bad.yaml"
    config_file.write_text("address: ':9400'\n\ncolect-interval: 1000\n")
    with pytest.raises(ConfigError) as caught:
        load_config(["--config-file", str(config_file)], {})
    assert str(caught.value).startswith(f"{config_file}:3: colect-interval: unknown key")

    config_file.write_text("collect-interval: fast\n")
    with pytest.raises(ConfigError) as caught:
        load_config(["--config-file", str(config_file)], {})
    assert str(caught.value).startswith(f"{config_file}:1: collect-interval: invalid value 'fast'")

    config_file.write_text("address: [unclosed\n")
    with pytest.raises(ConfigError) as caught:
        load_config(["--config-file", str(config_file)], {})
    assert f"{config_file}:2: yaml: not valid YAML" in str(caught.value)


def test_the_command_line_prints_one_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--collect-interval", "soon"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("gpu-pod-exporter: error: flag --collect-interval: collect-interval:")
    assert "Traceback" not in err


def test_a_missing_counters_file_is_a_one_line_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["-f", str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "flag --collectors:" in err and "cannot read counters file" in err


def test_every_option_has_an_environment_variable_and_help() -> None:
    for option in OPTIONS:
        assert option.env, option.attr
        assert option.help.endswith("."), option.attr
        assert getattr(Config(), option.attr) == option.default


def test_a_broken_counters_line_is_a_one_line_error_with_file_and_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    csv = tmp_path / "counters.csv"
    csv.write_text("# my counters\nDCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\nDCGM_FI_DEV_FB_USED, gauge\n")
    assert main(["-f", str(csv)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{csv}:3: DCGM_FI_DEV_FB_USED: expected 3 columns" in err
    assert "Traceback" not in err


# --- dcgm-exporter's flags: every one of every release is accepted (tests/upstream/test_flags.py) ---------

def test_flags_without_meaning_here_warn_once_each_saying_why() -> None:
    argv = ["-r", "host:5555", "--fake-gpus", "-s", "g", "--enable-pprof"]
    warnings = load_config(argv, {"DISABLE_STARTUP_VALIDATE": "true"}).no_effect_warnings()
    assert len(warnings) == 5
    assert warnings[0].startswith("flag --remote-hostengine-info is accepted for compatibility")
    assert "no DCGM host engine" in warnings[0]
    assert any("--simulate" in line for line in warnings)
    assert any(line.startswith("environment variable DISABLE_STARTUP_VALIDATE (--disable-startup-validate)")
               for line in warnings)
    assert load_config(["-s", "f", "-p", "f"], {}).no_effect_warnings() == []  # dcgm-exporter's defaults


@pytest.mark.parametrize(("argv", "message"), [
    (["-d", "q"], "invalid device selector 'q'"),
    (["-m", "no-colon"], "expected <namespace>:<name>"),
    (["-m", "Bad_NS:x"], "expected <namespace>:<name>"),
])
def test_a_malformed_upstream_value_is_one_line_and_exit_2(argv: list[str], message: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_configmap_none_is_dcgm_exporters_unset() -> None:
    assert load_config(["-m", "none"], {}).configmap_data is None


def test_configmap_reference_is_parsed_once_into_namespace_and_name() -> None:
    reference = load_config([], {"DCGM_EXPORTER_CONFIGMAP_DATA": "gpu-monitoring:exporter.counters"}).configmap_data
    assert reference is not None
    assert (reference.namespace, reference.name) == ("gpu-monitoring", "exporter.counters")
    assert (str(reference), reference.path) == ("gpu-monitoring:exporter.counters", "gpu-monitoring/exporter.counters")


@pytest.mark.parametrize("spelling", ["1", "t", "T", "TRUE", "true", "True"])
def test_go_true_spellings_in_the_environment(spelling: str) -> None:
    assert load_config([], {"DCGM_EXPORTER_KUBERNETES": spelling}).kubernetes is True


@pytest.mark.parametrize("spelling", ["0", "f", "F", "FALSE", "false", "False"])
def test_go_false_spellings_in_the_environment(spelling: str) -> None:
    assert load_config([], {"DCGM_EXPORTER_NO_HOSTNAME": spelling}).no_hostname is False


def test_go_single_dash_long_flags_are_the_long_flags() -> None:
    config = load_config(["-collectors", "/etc/dcgm-exporter/dcp-metrics-included.csv", "-kubernetes",
                          "-collect-interval=2000", "-rbmn", "-kubernetes-gpu-id-type", "device-name"], {})
    assert config.collectors == "/etc/dcgm-exporter/dcp-metrics-included.csv"
    assert config.kubernetes is True
    assert config.collect_interval_ms == 2000
    assert config.replace_blanks_in_model_name is True  # -rbmn is its own short flag, not -r bmn
    assert config.kubernetes_gpu_id_type == "device-name"
    # a value that looks like a flag is still the value of the flag before it
    assert load_config(["--dcgm-log-level", "-kubernetes"], {}).kubernetes is False


def test_repeated_list_flags_accumulate_as_upstream_string_slices() -> None:
    config = load_config(["--nvidia-resource-names", "nvidia.com/a100", "--nvidia-resource-names",
                          "nvidia.com/h100,nvidia.com/l4", "--kubernetes-pod-label-allowlist-regex", "^app$",
                          "-kubernetes-pod-label-allowlist-regex", "^team$"], {})
    assert config.nvidia_resource_names == ("nvidia.com/a100", "nvidia.com/h100", "nvidia.com/l4")
    assert config.kubernetes_pod_label_allowlist_regex == ("^app$", "^team$")


def test_dcgm_exporter_4_8_3_flags_are_accepted_with_their_variables() -> None:
    config = load_config(["--web-read-timeout", "15s", "--web-write-timeout=1m30s"],
                         {"DCGM_EXPORTER_CONTAINER_LABELS": "true",
                          "DCGM_CONTAINER_RUNTIME_SOCKET": "/run/docker.sock"})
    assert (config.web_read_timeout_s, config.web_write_timeout_s) == (15.0, 90.0)
    warnings = config.no_effect_warnings()
    assert any(line.startswith("environment variable DCGM_EXPORTER_CONTAINER_LABELS (--container-labels)")
               and "not supported here" in line for line in warnings)
    assert any("DCGM_CONTAINER_RUNTIME_SOCKET" in line for line in warnings)
    with pytest.raises(ConfigError, match="flag --web-read-timeout: web-read-timeout: invalid duration '10 seconds'"):
        load_config(["--web-read-timeout", "10 seconds"], {})


def test_compatibility_setting_selects_the_node_label_spelling_of_each_release() -> None:
    assert load_config([], {}).hostname_label == "hostname"  # auto: the newest release, as upstream ships today
    for release in ("4.8.0", "4.8.1", "4.8.2"):
        assert load_config(["--dcgm-exporter-compat", release], {}).hostname_label == "Hostname"
    for release in ("4.8.3", "4.8.4"):
        assert load_config(["--dcgm-exporter-compat", release], {}).hostname_label == "hostname"
    assert load_config([], {"GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT": "4.8.2"}).hostname_label == "Hostname"
    with pytest.raises(ConfigError, match=r"expected one of auto, 4\.8\.0, 4\.8\.1, 4\.8\.2, 4\.8\.3, 4\.8\.4"):
        load_config(["--dcgm-exporter-compat", "4.9"], {})


def test_auto_compatibility_is_the_newest_release_and_says_so_once() -> None:
    """dcgm-exporter 4.8.4's example DaemonSet sets the same three variables as 4.8.2's (LISTEN,
    KUBERNETES, NODE_NAME): nothing in the process tells them apart, so auto is what upstream ships now."""
    plain = load_config([], {"DCGM_EXPORTER_LISTEN": ":9400", "DCGM_EXPORTER_KUBERNETES": "true",
                             "NODE_NAME": "node-1"})
    assert (plain.dcgm_exporter_compat, plain.hostname_label) == ("4.8.4", "hostname")
    assert plain.compat_note == ("dcgm-exporter 4.8.4 behaviour (auto: the newest dcgm-exporter release known here "
                                 "(4.6.1-4.8.4); --dcgm-exporter-compat=4.8.2 keeps the Hostname label of 4.8.2 and "
                                 "earlier): the node label is hostname")
    chosen = load_config(["--dcgm-exporter-compat", "4.8.2", "--web-read-timeout", "10s"], {})
    assert (chosen.hostname_label, chosen.compat_note) == ("Hostname", "")  # the user's choice wins, silently


def test_an_unknown_flag_names_the_newest_release_known_and_the_guides_section(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--watch-max-keep-everything=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unrecognized arguments: --watch-max-keep-everything=1" in err
    assert "dcgm-exporter up to 4.6.1-4.8.4" in err
    anchor = err.rsplit("#", 1)[1].strip()
    guide = (Path(__file__).resolve().parents[1] / "docs" / "migrate-from-dcgm-exporter.md").read_text()
    assert "## A dcgm-exporter release newer than this guide" in guide and \
        anchor == "a-dcgm-exporter-release-newer-than-this-guide"


def test_defaults_that_differ_from_dcgm_exporters_are_named_when_left_to_them() -> None:
    lines = load_config([], {}).default_differences()
    assert lines == [
        "--collect-interval not given: sampling every 1000 ms; dcgm-exporter's default is 30000 ms "
        "(-c 30000 for its cadence)"]  # MIG chip-wide series are per instance by default, as dcgm-exporter's
    assert load_config(["-c", "30000"], {}).default_differences() == []


def test_mig_chip_series_defaults_to_per_instance_and_takes_flag_env_and_file(tmp_path: Path) -> None:
    assert load_config([], {}).mig_chip_series == "per-instance"
    assert load_config(["--mig-chip-series", "once"], {}).mig_chip_series == "once"
    assert load_config([], {"GPU_POD_EXPORTER_MIG_CHIP_SERIES": "once"}).mig_chip_series == "once"
    config_file = tmp_path / "exporter.yaml"
    config_file.write_text("mig-chip-series: once\n", encoding="utf-8")
    assert load_config(["--config-file", str(config_file)], {}).mig_chip_series == "once"
    assert load_config(["--config-file", str(config_file), "--mig-chip-series", "per-instance"],
                       {}).mig_chip_series == "per-instance"
    with pytest.raises(ConfigError, match="mig-chip-series"):
        load_config(["--mig-chip-series", "twice"], {})


def test_a_dcgm_exporter_variable_no_release_reads_is_named_once_at_start() -> None:
    """A newer dcgm-exporter's variable cannot stop the start (the pod spec sets what it likes), but it is
    never dropped without a word: one line names it, the newest release known and the guide's section."""
    config = load_config([], {"DCGM_EXPORTER_FUTURE_KNOB": "1", "DCGM_EXPORTER_INTERVAL": "2000",
                              "DCGM_EXPORTER_CONFIG_FILE": "", "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert config.notes == (
        "environment variable DCGM_EXPORTER_FUTURE_KNOB is not read by this exporter and is not a variable of "
        "dcgm-exporter up to 4.6.1-4.8.4; a newer release's? see "
        "docs/migrate-from-dcgm-exporter.md#a-dcgm-exporter-release-newer-than-this-guide",)


def test_each_setting_is_declared_once_as_a_config_field_that_carries_its_spellings() -> None:
    """OPTIONS is read back from Config's fields: a field's name, type and default are its option's."""
    plain = {"config_file", "inline_counters", "inline_counters_source", "notes", "sources"}  # not settable
    declared = {item.name: item for item in dataclasses.fields(Config) if item.name not in plain}
    assert [option.attr for option in OPTIONS] == list(declared)
    for option in OPTIONS:
        assert option.default == declared[option.attr].default == getattr(Config(), option.attr)


def test_a_new_field_declared_with_setting_is_a_flag_a_variable_and_a_file_key() -> None:
    @dataclasses.dataclass(frozen=True)
    class Settings:
        answer_ms: int = setting(("--answer",), "ANSWER_MS", positive_int(1, "milliseconds"), 42, "The answer.")
        unspelled: str = ""

    [option] = declared_options(Settings)
    assert (option.attr, option.long_flag, option.env, option.yaml_key, option.default) == (
        "answer_ms", "--answer", "ANSWER_MS", "answer", 42)
    assert option.parse("7") == 7


def test_team_label_sources_are_parsed_once_where_they_are_read() -> None:
    config = load_config(["--kubernetes-team-label-sources", "namespace:owner,pod:squad"], {})
    assert config.team_label_sources == (TeamSource("namespace", "owner"), TeamSource("pod", "squad"))
    assert [str(source) for source in Config().team_label_sources] == ["pod:team", "namespace:team"]
    with pytest.raises(ConfigError, match="kubernetes-team-label-sources: invalid label source 'node:team'"):
        load_config([], {"GPU_POD_EXPORTER_TEAM_LABEL_SOURCES": "node:team"})
