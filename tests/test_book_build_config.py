"""`papa book build --config OTHER` never rewrites the default book's tracked pages unasked: it is refused,
exit 2, before anything runs or is written, unless --replace-pages says to."""

from __future__ import annotations

from papa.cli import build_parser, main
from papa.pipeline.plan import ROOT

WATCHED = [ROOT / "_toc.yml", ROOT / "book" / "index.md", *sorted((ROOT / "book").glob("*.md"))]


def test_another_grids_book_is_refused_and_the_tracked_pages_stay(capsys, monkeypatch):
    from papa.book import build

    ran = []
    monkeypatch.setattr(build, "run_grid", lambda *args, **kwargs: ran.append(args) or 0)
    monkeypatch.setattr(build, "check_assets", lambda: None)  # checked first; this checkout may lack MathJax
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in WATCHED}
    assert main(["book", "build", "--config", "configs/smoke.yaml"]) == 2
    assert capsys.readouterr().err == (
        "papa: error: papa book build --config smoke.yaml would rewrite the default book's tracked pages (_toc.yml, "
        "book/*.md) with grid 'smoke''s. Build it in a copy of the repository (git worktree add), or pass "
        "--replace-pages to rewrite them here (git checkout -- _toc.yml book restores them).\n"
    )
    assert ran == [] and {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in WATCHED} == before


def test_replace_pages_is_a_documented_flag():
    book = build_parser()._subparsers._group_actions[0].choices["book"]
    helps = {action.dest: action.help for action in book._actions}
    assert "rewrites the tracked pages (_toc.yml, book/*.md); refused without it" in helps["replace_pages"]
    assert "--replace-pages" in (ROOT / "README.md").read_text(encoding="utf-8")
