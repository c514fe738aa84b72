"""upstream/corpus.py reads a dcgm-exporter release's interface from its own files, and the committed
corpus (upstream/dcgm-exporter/) is the list every compatibility setting of the exporter is held to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.config import COMPAT_NEWEST, COMPAT_RELEASES, NEWEST_KNOWN_RELEASE
from upstream import corpus
from upstream.matrix import releases

APP_GO = '''package cmd

const (
\tCLIFieldsFile = "collectors"
\tCLIKubernetes = "kubernetes"
\tCLIWindow     = "xid-count-window-size"
\tdefaultAddr   = ":9400"
)

func NewApp() *cli.App {
\tc.Flags = []cli.Flag{
\t\t&cli.StringFlag{
\t\t\tName:    CLIFieldsFile,
\t\t\tAliases: []string{"f"},
\t\t\tUsage:   "Path to the file, that contains the DCGM fields, to collect",
\t\t\tValue:   "/etc/dcgm-exporter/default-counters.csv",
\t\t\tEnvVars: []string{"DCGM_EXPORTER_COLLECTORS"},
\t\t},
\t\t// &cli.BoolFlag{Name: "commented-out"},
\t\t&cli.BoolFlag{
\t\t\tName:    CLIKubernetes,
\t\t\tAliases: []string{"k"},
\t\t\tEnvVars: []string{"DCGM_EXPORTER_KUBERNETES"},
\t\t},
\t\t&cli.IntFlag{
\t\t\tName:    CLIWindow,
\t\t\tValue:   int((5 * time.Minute).Milliseconds()),
\t\t\tEnvVars: []string{"DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", "XID_WINDOW"},
\t\t},
\t\t&cli.StringFlag{Name: "address", Value: defaultAddr},
\t}
}
'''

YAML_CONFIG_GO = '''package appconfig

type FileConfig struct {
\tVersion     int               `yaml:"version"`
\tMetrics     *MetricsConfig    `yaml:"metrics,omitempty"`
\tCollections []CollectionBlock `yaml:"collections,omitempty"`
}

type MetricsConfig struct {
\tFile string `yaml:"file"`
}

type CollectionBlock struct {
\tName  string `yaml:"name"`
\tEvery string `yaml:"every"`
}

const yamlConfigVersion2 = 2
'''


def _tree(tmp_path: Path) -> Path:
    files = {
        "pkg/cmd/app.go": APP_GO,
        "internal/pkg/appconfig/yaml_config.go": YAML_CONFIG_GO,
        "deployment/Chart.yaml": 'version: "9.9.9"\nappVersion: "9.9.9"\n',
        "deployment/values.yaml": "# prose is not data\nserviceAccount:\n  name:\n  automountServiceAccountToken:\n"
                                  "image:\n  digest: \"\"\n",
        "etc/default-counters.csv": "# Format\nDCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
                                    "# DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL, counter, Total SM cycles.\n",
        "dcgm-exporter.yaml": "kind: DaemonSet\nspec:\n  template:\n    spec:\n      containers:\n"
                              "      - image: x\n        env:\n        - name: DCGM_EXPORTER_KUBERNETES\n"
                              "          value: \"true\"\n",
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    return tmp_path


def test_the_reader_takes_flags_values_csv_rows_config_keys_and_daemonset_from_the_files(tmp_path: Path) -> None:
    record = corpus.build_record(corpus.DirectoryTree(_tree(tmp_path)), "9.9.9-9.9.9")
    flags = {flag["name"]: flag for flag in record["flags"]}
    assert sorted(flags) == ["address", "collectors", "kubernetes", "xid-count-window-size"]  # not the comment
    assert flags["collectors"] == {"name": "collectors", "aliases": ["f"], "env": ["DCGM_EXPORTER_COLLECTORS"],
                                   "type": "string", "default": "/etc/dcgm-exporter/default-counters.csv"}
    assert flags["kubernetes"]["default"] is False  # a BoolFlag without Value: Go's zero value
    assert flags["xid-count-window-size"]["default"] == 300000
    assert flags["xid-count-window-size"]["env"] == ["DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", "XID_WINDOW"]
    assert flags["address"]["default"] == ":9400"  # a constant of the package
    # Values as released: the empty values are nulls, and nothing of the comments.
    assert record["chart"]["values"] == {"serviceAccount": {"name": None, "automountServiceAccountToken": None},
                                         "image": {"digest": ""}}
    csv = record["csv"]["etc/default-counters.csv"]
    assert csv["rows"] == [["DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."]]
    assert csv["commented_rows"] == [["DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL", "counter", "Total SM cycles."]]
    assert record["config_file"]["versions"] == [2]
    assert record["config_file"]["structs"]["FileConfig"] == {
        "version": "int", "metrics": {"file": "string"}, "collections": [{"name": "string", "every": "string"}]}
    assert record["example_daemonsets"]["dcgm-exporter.yaml"]["env"] == [
        {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"}]


def test_an_expression_the_reader_cannot_resolve_is_an_error_naming_the_file(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    (tree / "pkg/cmd/app.go").write_text(APP_GO.replace("CLIKubernetes,\n", "someFunction(),\n", 1), encoding="utf-8")
    with pytest.raises(corpus.CorpusError, match=r"pkg/cmd/app.go: &cli.BoolFlag: cannot resolve .*someFunction"):
        corpus.build_record(corpus.DirectoryTree(tree), "9.9.9-9.9.9")
    errors: list[str] = []
    assert corpus.main([str(tree), "9.9.9-9.9.9", "--out", str(tmp_path / "out")], on_error=errors.append) == 2
    assert len(errors) == 1 and "someFunction" in errors[0]


def test_a_release_name_that_is_not_dcgm_dash_exporter_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(corpus.CorpusError, match="<DCGM version>-<exporter version>"):
        corpus.build_record(corpus.DirectoryTree(_tree(tmp_path)), "4.8.4")


def test_the_exporters_release_list_is_the_corpus_and_auto_is_its_newest() -> None:
    records = releases()
    assert {r["exporter_version"]: r["release"] for r in records} == COMPAT_RELEASES
    assert records[-1]["exporter_version"] == COMPAT_NEWEST
    assert records[-1]["release"] == NEWEST_KNOWN_RELEASE


@pytest.mark.parametrize("record", releases(), ids=lambda r: r["release"])
def test_each_record_holds_the_whole_interface_of_its_release(record: dict[str, object]) -> None:
    path = corpus.CORPUS / f"{record['release']}.json"
    assert json.loads(path.read_text(encoding="utf-8")) == record
    assert record["corpus_schema"] == corpus.SCHEMA_VERSION
    flags = record["flags"]
    assert isinstance(flags, list) and len(flags) >= 35  # dcgm-exporter 4.8.0 already had 37
    assert all(flag["env"] for flag in flags), "every dcgm-exporter flag has an environment variable"
    chart = record["chart"]
    assert isinstance(chart, dict) and chart["version"] == record["exporter_version"]
    assert "etc/default-counters.csv" in record["csv"]  # type: ignore[operator]
    assert record["example_daemonsets"], "the example DaemonSet is part of what users run"


def test_the_charts_newest_release_and_compat_choices_are_the_corpus() -> None:
    chart = corpus.ROOT / "deploy" / "helm" / "gpu-pod-exporter"
    compat = (chart / "templates" / "_compat.tpl").read_text(encoding="utf-8")
    assert f'"gpu-pod-exporter.newestUpstreamRelease" -}}}}{NEWEST_KNOWN_RELEASE}{{{{- end' in compat
    assert f'(list {" ".join(json.dumps(v) for v in COMPAT_RELEASES)})' in compat
    schema = json.loads((chart / "values.schema.json").read_text(encoding="utf-8"))
    assert schema["properties"]["exporter"]["properties"]["dcgmExporterCompat"]["enum"] == ["", *COMPAT_RELEASES]
