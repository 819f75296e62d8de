"""The README and the docs point only at files that exist, inside the repository, and at headings that exist.

Links are checked the way GitHub renders them: a relative target is resolved against the page's own folder,
and a `#fragment` must be the anchor GitHub makes of one of the target page's headings."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
         ROOT / "examples" / "README.md"]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def targets(text):
    """Every relative link and picture target of a markdown page, outside code blocks and code spans."""
    found = LINK.findall(CODE.sub("", FENCE.sub("", text)))
    return [t for t in found if not re.match(r"[a-z]+:", t)]       # web and mail links are not ours to check


def anchors(text):
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces become dashes."""
    seen, result = {}, set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", FENCE.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        result.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return result


def broken(page, root=ROOT):
    """The targets of `page` that leave `root`, name no existing file, or name a heading their page lacks."""
    problems = []
    for target in targets(page.read_text()):
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.is_relative_to(root) or not resolved.exists():
            problems.append(target)
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved.read_text()):
            problems.append(target)
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_link_and_picture_resolves_inside_the_repository(page):
    assert broken(page) == []


def test_no_page_points_at_the_shared_folder():
    assert [p.name for p in PAGES if "../shared" in p.read_text()] == []


def test_the_check_catches_missing_files_headings_and_escapes(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "pic.svg").write_text("<svg/>")
    (tmp_path / "outside.md").write_text("# Out\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text("# A page (v1)\n\n[ok](#a-page-v1) ![pic](pic.svg) [gone](gone.svg) [bad](#nothing)\n"
                    "[up](../outside.md) `[code](code.md)` [web](https://example.org)\n```\n[nor](this.md)\n```\n")
    assert targets(page.read_text()) == ["#a-page-v1", "pic.svg", "gone.svg", "#nothing", "../outside.md"]
    assert broken(page, root=tmp_path / "docs") == ["gone.svg", "#nothing", "../outside.md"]
    assert broken(page, root=tmp_path) == ["gone.svg", "#nothing"]
