"""The docs' example reader and comparer (tests/support/doc_examples.py) on small pages: a
drifted example must fail, and only ports, the hostname and times may differ."""

from __future__ import annotations

from pathlib import Path

from tests.support.doc_examples import Command, FileBlock, compare_output, read_page

PAGE = '''# A page

```yaml title="rgd.yaml"
resourcegroups: {gold: {publishRateInMsgs: 10}}
```

```console
$ .venv/bin/rgd run --config rgd.yaml
```

```console
$ curl -s localhost:8080/healthz
{"status":"ok"}
$ curl -s localhost:8080/v1/acquire \\
    -d '{"namespace":"a/b"}'
{"allowed":true}
```

<!-- not-run: needs a Kubernetes cluster -->
```bash
kubectl apply -k k8s/
```

```bash
echo unmarked
```
'''


def test_the_reader_finds_files_commands_and_marked_blocks() -> None:
    page = read_page(Path("page.md"), PAGE)
    assert page.steps == [
        FileBlock(3, "rgd.yaml", "resourcegroups: {gold: {publishRateInMsgs: 10}}\n"),
        Command(8, ".venv/bin/rgd run --config rgd.yaml", ""),
        Command(12, "curl -s localhost:8080/healthz", '{"status":"ok"}'),
        Command(14, "curl -s localhost:8080/v1/acquire \\\n    -d '{\"namespace\":\"a/b\"}'", '{"allowed":true}'),
    ]
    assert [(b.why, b.content) for b in page.not_run] == [("needs a Kubernetes cluster", "kubectl apply -k k8s/")]
    assert page.unmarked_shell == [24]


def test_only_ports_hostnames_and_times_may_differ() -> None:
    host = "build-vm-7"
    shown = ('{"broker_url":"pulsar://127.0.0.1:6650","members":["my-laptop"],"ticks":5,'
             '"lease":{"valid":false,"seconds_left":2.876}}')
    same = ('{"broker_url":"pulsar://127.0.0.1:41234","members":["build-vm-7"],"ticks":97,'
            '"lease":{"valid":false,"seconds_left":2.859}}')
    assert compare_output(shown, same, host) == []
    assert compare_output(shown, same.replace("false", "true"), host)  # a value
    assert compare_output(shown, same.replace('"ticks":97', '"ticks":"97"'), host)  # a type
    assert compare_output(shown, same.replace('"valid":false,', ""), host)  # a key
    assert compare_output(shown, same.replace("2.859", '"soon"'), host)  # a time's type
    assert compare_output(shown, same.replace("build-vm-7", "other-host"), host)  # another id than ours
    assert compare_output('{"remaining_messages":40}', '{"remaining_messages":41}', host)
    assert compare_output("worst tick 1.3% over; 2 ms", "worst tick 1.3% over; 4 ms", host) == []
    assert compare_output("worst tick 1.3% over", "worst tick 7.0% over", host)
    assert compare_output("a\nb", "a", host)  # a line missing
    assert compare_output('{"a": 1}', "not json", host)


def test_pretty_printed_json_is_compared_as_json() -> None:
    assert compare_output('{\n    "a": [\n        1\n    ]\n}', '{"a":[1]}', "h") == []
