"""README.md documents every route, flag, environment variable, setting and event."""
import importlib.util
import os
import re
import subprocess

import pytest

import taskboard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    README = f.read()
with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
    CI_RUN = f.read()


def _readme_path(rule):
    """/api/projects/<project_id:int>/tasks -> /api/projects/:projectId/tasks"""
    def camel(match):
        head, *rest = match.group(1).split("_")
        return ":" + head + "".join(word.title() for word in rest)
    return re.sub(r"<(\w+):int>", camel, rule)


API_ROUTES = sorted({(r.method, _readme_path(r.rule)) for r in taskboard.app.routes
                     if r.rule.startswith("/api/")})


@pytest.mark.parametrize("method,path", API_ROUTES)
def test_readme_documents_route(method, path):
    assert re.search(rf"\| {method} \| `{re.escape(path)}` \|", README), \
        f"{method} {path} is missing from README.md"


@pytest.mark.parametrize("option", taskboard.OPTIONS + taskboard.ENV_SETTINGS,
                         ids=lambda o: o.env)
def test_readme_documents_option(option):
    assert f"`{option.env}`" in README
    if option.flag:
        assert f"| `{option.flag}` | `{option.env}` |" in README


@pytest.mark.parametrize("field", taskboard.SETTINGS_FIELDS, ids=lambda f: f.name)
def test_readme_documents_setting_with_its_default(field):
    default = {None: "null", 1: "true", 0: "false"}.get(field.default, field.default) \
        if field.kind == "bool" or field.default is None else field.default
    assert re.search(rf"\| `{field.name}` \| `{default}` \|", README), field.name


@pytest.mark.parametrize("name", sorted({*taskboard.COMMANDS, *taskboard.RUN_TOOLS}))
def test_readme_documents_command(name):
    """Desktop commands are routes (checked above); board tools are named in the text."""
    assert f"`{name}`" in README or f"/api/desktop/{name}`" in README, name


@pytest.mark.parametrize("event", sorted(taskboard.EVENT_TYPES))
def test_readme_documents_event(event):
    assert f"`{event}`" in README


@pytest.mark.parametrize("event", sorted(taskboard.PUSH_EVENTS))
def test_readme_documents_push_event(event):
    """Each event a device can be sent, in the Phones section."""
    phones = README.split("### Phones", 1)[1].split("\n### ", 1)[0]
    assert f"`{event}`" in phones, event


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    blocks = re.findall(r"<!-- (\w+)-command -->\n```\n(.+)\n```", README)
    assert [name for name, _ in blocks] == ["run", "test"]
    extracted = subprocess.run(
        ["bash", "-c", "awk '/<!-- test-command -->/ {found = 1; next} found && /^```/ "
         "{if (inside) exit; inside = 1; next} found && inside {print; exit}' README.md"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert extracted == blocks[1][1]
    assert "awk '/<!-- test-command -->/" in CI_RUN
    assert "taskboard.py" in blocks[0][1] and "pytest" in blocks[1][1]


def test_readme_working_commands_name_tests_and_markers_that_exist(pytestconfig):
    """The README's ways to run one file, one test and the fast subset stay true."""
    for path, name in re.findall(r"pytest (tests/\w+\.py)::(\w+)", README):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            assert f"def {name}(" in f.read(), f"{path}::{name} in the README"
    markers = " ".join(pytestconfig.getini("markers"))
    for marker in re.findall(r'-m "not (\w+) and not (\w+)"', README)[0]:
        assert f"{marker}:" in markers, marker
    assert "-n auto" in re.search(r"<!-- test-command -->\n```\n(.+)\n```", README).group(1)


def test_the_module_map_lists_every_section_in_order():
    """The map at the top of taskboard.py is the way into the module: it stays true."""
    with open(os.path.join(ROOT, "taskboard.py"), encoding="utf-8") as f:
        source = f.read()
    banners = re.findall(r"^# =+\n# ([A-Z][^\n]*)\n# =+$", source, re.M)
    block = taskboard.__doc__.split("ordered sections", 1)[1].split("\n\n")[1]
    listed = [name.strip() for name in block.replace("\n", " ").split("·") if name.strip()]
    assert listed == banners


def _readme_reference_tool():
    spec = importlib.util.spec_from_file_location(
        "readme_reference", os.path.join(ROOT, "tools", "readme_reference.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


@pytest.mark.parametrize("name", sorted(taskboard.readme_reference()))
def test_readme_generated_blocks_say_what_the_tables_say(name):
    """The README's reference tables are made from the field tables (their docs): a block
    edited by hand, or a table changed without it, fails until it is made again."""
    blocks = _readme_reference_tool().blocks(README)
    assert name in blocks, f"README.md has no <!-- generated: {name} --> block"
    assert blocks[name] == taskboard.readme_reference()[name], (
        f"README.md's generated block {name!r} differs from the tables in taskboard.py: "
        "run `.venv/bin/python tools/readme_reference.py` (and edit a field's doc, not the "
        "README, to change its text)")
