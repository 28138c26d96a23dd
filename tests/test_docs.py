"""The algorithm notes in docs/ cannot rot silently: every page's ```python blocks run, and its references are whole.

Each algorithm page carries a worked example: its ```python blocks run in order in one namespace (as a reader would
paste them into one session), from the repository root, and their asserts state the claim the example shows. A page
must also end with a References section that lists every work it cites and only those, and link only relative paths
that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
OPERATIONS_PAGES = {"README.md", "cluster.md", "replicas.md"}  # docs/README.md lists these apart: no derivation, no example
ALGORITHM_PAGES = sorted(p.name for p in DOCS.glob("*.md") if p.name not in OPERATIONS_PAGES)

CODE_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A reference entry: "- Surname, A. B., Other, C., & Last, D. (1999). Title ..." -> (Surname, 1999).
REFERENCE = re.compile(r"^- (?P<surname>[^\s,]+(?: [a-z]+ [A-Z]\w+)?), .*?\((?P<year>\d{4})[a-z]?\)", re.M)


def page(name: str) -> str:
    return (DOCS / name).read_text()


def split_references(text: str) -> tuple[str, str]:
    """(body, references list) of a page; the list is everything after its '## References' heading."""
    body, found, references = text.partition("\n## References\n")
    assert found, "no '## References' section"
    return body, references


def examples(text: str) -> str:
    return "\n".join(block for block in CODE_BLOCK.findall(text))


def run_examples(text: str, name: str) -> None:
    code = examples(text)
    exec(compile(code, f"docs/{name}", "exec"), {"__name__": f"docs_{name}"})


@pytest.mark.parametrize("name", ALGORITHM_PAGES)
def test_worked_example_runs(name, monkeypatch):
    text = page(name)
    assert CODE_BLOCK.search(text), f"docs/{name} has no ```python worked example"
    monkeypatch.chdir(REPO)
    run_examples(text, name)


def test_a_broken_example_fails():
    """The runner really executes the blocks: a wrong claim in an example raises."""
    with pytest.raises(AssertionError):
        run_examples("Text.\n\n```python\nimport torch\nassert torch.ones(2).sum() == 3\n```\n", "broken.md")


@pytest.mark.parametrize("name", ALGORITHM_PAGES)
def test_references_are_cited_and_complete(name):
    body, references = split_references(page(name))
    entries = REFERENCE.findall(references)
    listed = {(surname.split()[-1], year) for surname, year in entries}
    assert len(entries) == len([line for line in references.splitlines() if line.startswith("- ")]), (
        f"docs/{name}: a reference entry is not in 'Surname, A. (Year).' form")
    uncited = [f"{s} ({y})" for s, y in sorted(listed) if not re.search(rf"{re.escape(s)}\b[^()]{{0,60}}\(?{y}", body)]
    assert not uncited, f"docs/{name} lists works it never cites: {uncited}"
    # Every "Surname (Year)", "Surname et al. (Year)", "(Surname, Year" or "Surname & Other, Year" in the text is listed.
    cited = set(re.findall(r"([A-Z][A-Za-z\u00C0-\u017F'-]+)(?:\s+et al\.|\s+&\s+[A-Z][\w'-]+)?,?\s\(?(\d{4})[a-z]?\b", body))
    missing = [f"{s} ({y})" for s, y in sorted(cited) if (s, y) not in listed]
    assert not missing, f"docs/{name} cites works its References section does not list: {missing}"


@pytest.mark.parametrize("name", sorted(p.name for p in DOCS.glob("*.md")))
def test_links_are_relative_and_resolve(name):
    for target in LINK.findall(page(name)):
        if target.startswith(("http://", "https://")):
            assert "github.com" not in target or "/blob/" not in target, f"docs/{name}: link to our own files by URL: {target}"
            continue
        assert not target.startswith("/"), f"docs/{name}: absolute link {target}"
        path = target.split("#")[0]
        if path:
            assert (DOCS / path).resolve().exists(), f"docs/{name}: broken link {target}"


def test_reading_order_goes_from_the_basics_up():
    """docs/README.md lists every algorithm page, these in their dependency order (a new page goes anywhere after the
    pages it builds on), then the operations pages apart."""
    listed = re.findall(r"^- \[([\w-]+\.md)\]", page("README.md"), re.M)
    operations = OPERATIONS_PAGES - {"README.md"}
    algorithms = [name for name in listed if name not in operations]
    assert listed[:len(algorithms)] == algorithms and set(listed[len(algorithms):]) == operations
    assert sorted(algorithms) == ALGORITHM_PAGES
    order = ["vae.md", "likelihoods.md", "score-function.md", "mis.md", "jsa.md", "multi-sample.md", "priors.md",
             "vqvae.md", "sgmcmc.md"]
    assert [name for name in algorithms if name in order] == order
