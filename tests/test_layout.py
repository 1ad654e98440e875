"""taskboard.py is one module of rooms: its banner sections, their map, their size and which
of them lean on which (issue 54).  Read as a newcomer reads it: by the names each section
uses of the others."""
import ast
import collections
import os
import re

import taskboard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(ROOT, "taskboard.py"), encoding="utf-8") as f:
    SOURCE = f.read()
with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    README = f.read()

#: The most lines a section may have: a full section is split, never overflowed.
MAX_SECTION_LINES = 900
#: The only sections that may lean on each other in a circle: services that call each
#: other, and the supervisor that calls back when a run ends.
CIRCLE_ALLOWED = re.compile(r"SERVICES: .+|SUPERVISORS")


def sections() -> list[tuple[str, int, int]]:
    """(name, first line, last line) of each banner section, in order."""
    lines = SOURCE.split("\n")
    starts = [(i + 2, lines[i + 1][2:]) for i in range(len(lines) - 2)
              if lines[i].startswith("# ====") and lines[i + 2].startswith("# ====")
              and re.fullmatch(r"# [A-Z][^a-z]*", lines[i + 1])]
    ends = [start - 2 for start, _ in starts[1:]] + [len(lines)]
    return [(name, start, end) for (start, name), end in zip(starts, ends, strict=True)]


def test_the_map_the_readme_and_the_banners_name_the_same_sections():
    """The module map at the top, the README's account and the banners agree, in order."""
    banners = [name for name, _, _ in sections()]
    block = taskboard.__doc__.split("ordered sections", 1)[1].split("\n\n")[1]
    mapped = [name.strip() for name in block.replace("\n", " ").split("·") if name.strip()]
    account = README.split("<!-- sections -->", 1)[1].split("<!-- /sections -->", 1)[0]
    described = re.findall(r"^- `([A-Z][^`]*)`", account, re.M)
    assert mapped == banners
    assert described == banners


def test_no_section_is_over_900_lines():
    sizes = {name: end - start + 1 for name, start, end in sections()}
    assert {name: n for name, n in sizes.items() if n > MAX_SECTION_LINES} == {}


def _leans_on(names: bool = False) -> dict:
    """section -> the sections whose top-level names it uses (in any function body); with
    names, (section, section used) -> the names."""
    bounds = sections()

    def section_of(line):
        return next((name for name, start, end in bounds if start <= line <= end), "HEAD")

    tree = ast.parse(SOURCE)
    home = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            home.setdefault(node.name, section_of(node.lineno))
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.For):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        home.setdefault(name.id, section_of(node.lineno))
    edges = collections.defaultdict(set)
    for node in tree.body:
        here = section_of(node.lineno)
        for name in ast.walk(node):
            if isinstance(name, ast.Name) and home.get(name.id, here) != here:
                edges[(here, home[name.id]) if names else here].add(
                    name.id if names else home[name.id])
    return edges


def _circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one section (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return found


def test_sections_lean_on_each_other_in_circles_only_among_services():
    """Store, events, fields, machines, the sandbox, agent output, HTTP, routes, MCP and
    main each lean only on what is below them; only services (and the supervisor that
    reports a run's end to them) may call each other both ways."""
    outside = [sorted(name for name in circle if not CIRCLE_ALLOWED.fullmatch(name))
               for circle in _circles(_leans_on())]
    assert [names for names in outside if names] == []


def test_each_section_uses_only_what_is_above_it_but_services():
    """Read top-down, a name is defined before the section that uses it: the foundations,
    the store, agent output, the sandbox and the machines first, the services and the
    supervisors (which call each other) next, then what serves them over HTTP and MAIN."""
    order = {name: n for n, (name, _, _) in enumerate(sections())}
    order["HEAD"] = -1
    below = {(user, used): sorted(names)
             for (user, used), names in _leans_on(names=True).items()
             if order[used] > order[user]
             and not (CIRCLE_ALLOWED.fullmatch(user) and CIRCLE_ALLOWED.fullmatch(used))}
    assert below == {}


def test_the_circle_check_sees_a_circle():
    """The check above can fail: two sections using each other's names are a circle."""
    edges = {"STORE": {"EVENTS"}, "EVENTS": {"STORE"}, "ROUTES": {"STORE"}}
    assert _circles(edges) == [{"STORE", "EVENTS"}]
