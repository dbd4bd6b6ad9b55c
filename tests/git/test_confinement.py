"""A repository under JCT_REPOS never leads git outside its location (issue 25): every path git opens.

Each attack is a real repository whose own files point git elsewhere; before the fix git followed them and
JCT read the outside repository's commits as the configured one's. Now opening it is refused with
REPO_NOT_AVAILABLE and a message that says it leads outside.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from server.config import Settings
from server.core.git import gitcli
from server.core.git.repos import Repos
from server.errors import ErrorCode, JctError
from tests.git.repo import Work, bare_clone, git

pytestmark = pytest.mark.anyio


def repos_of(tmp_path: Path) -> Repos:
    settings = Settings(
        home=tmp_path / "home",
        database_url="sqlite:///x.db",
        repos=[f"myorg/={tmp_path / 'team'}"],
    )
    return Repos(settings)


async def refused(tmp_path: Path, name: str = "myorg/api") -> str:
    with pytest.raises(JctError) as caught:
        await repos_of(tmp_path).open(name)
    assert caught.value.code == ErrorCode.REPO_NOT_AVAILABLE
    assert "outside" in caught.value.message, caught.value.message
    return caught.value.message


@pytest.fixture
def outside(tmp_path: Path) -> Work:
    """A repository outside the location, with a secret commit."""
    work = Work(tmp_path / "outside")
    work.write("secret.txt", "the outside's secret\n")
    work.commit("secret")
    return work


@pytest.fixture
def inside(tmp_path: Path) -> Path:
    """A bare repository under the location, readable."""
    return bare_clone(Work(tmp_path / "src" / "api").path, tmp_path / "team" / "api.git")


async def test_a_plain_repository_and_its_own_links_inside_are_read(tmp_path: Path, inside: Path) -> None:
    packs = inside / "objects" / "pack"
    git(inside, "repack", "-a", "-d", "-q")
    # A pack moved elsewhere under the location and linked back is still inside.
    store = tmp_path / "team" / "store"
    store.mkdir()
    for pack in packs.glob("pack-*"):
        shutil.move(pack, store / pack.name)
        pack.symlink_to(store / pack.name)
    place = await repos_of(tmp_path).open("myorg/api")
    assert place is not None
    assert await gitcli.resolve(place.repo, "main", within=10) is not None


async def test_a_commondir_outside_is_refused(tmp_path: Path, outside: Work) -> None:
    """`commondir` makes git take refs and objects from another directory: the outside repository's."""
    fake = tmp_path / "team" / "api.git"
    (fake / "objects").mkdir(parents=True)
    (fake / "refs").mkdir()
    (fake / "HEAD").write_text("ref: refs/heads/main\n")
    (fake / "commondir").write_text(f"{outside.path / '.git'}\n")
    assert "commondir" in await refused(tmp_path)


async def test_a_relative_commondir_climbing_out_is_refused(tmp_path: Path, outside: Work) -> None:
    fake = tmp_path / "team" / "api.git"
    (fake / "objects").mkdir(parents=True)
    (fake / "HEAD").write_text("ref: refs/heads/main\n")
    (fake / "commondir").write_text("../../outside/.git\n")
    await refused(tmp_path)


async def test_a_pack_symlinked_outside_is_refused(tmp_path: Path, outside: Work, inside: Path) -> None:
    outside.git("repack", "-a", "-d", "-q")
    for pack in (outside.path / ".git" / "objects" / "pack").glob("pack-*"):
        (inside / "objects" / "pack" / pack.name).symlink_to(pack)
    assert "link" in await refused(tmp_path)


async def test_a_loose_object_directory_symlinked_outside_is_refused(
    tmp_path: Path, outside: Work, inside: Path
) -> None:
    sha = outside.head()
    fanout = inside / "objects" / sha[:2]
    shutil.rmtree(fanout, ignore_errors=True)
    fanout.symlink_to(outside.path / ".git" / "objects" / sha[:2])
    await refused(tmp_path)


async def test_alternates_that_borrow_from_outside_through_another_are_refused(
    tmp_path: Path, outside: Work, inside: Path
) -> None:
    """An alternate under the location whose own alternates lead outside: git follows the chain."""
    other = bare_clone(Work(tmp_path / "src" / "other").path, tmp_path / "team" / "other.git")
    (inside / "objects" / "info").mkdir(exist_ok=True)
    (inside / "objects" / "info" / "alternates").write_text(f"{other / 'objects'}\n")
    assert await repos_of(tmp_path).open("myorg/api") is not None
    (other / "objects" / "info").mkdir(exist_ok=True)
    (other / "objects" / "info" / "alternates").write_text(f"{outside.path / '.git' / 'objects'}\n")
    await refused(tmp_path)


async def test_grafts_linked_outside_are_refused(tmp_path: Path, outside: Work, inside: Path) -> None:
    (outside.path / "grafts").write_text(f"{outside.head()}\n")
    (inside / "info").mkdir(exist_ok=True)
    (inside / "info" / "grafts").symlink_to(outside.path / "grafts")
    await refused(tmp_path)


async def test_a_worktree_link_outside_is_refused(tmp_path: Path, outside: Work, inside: Path) -> None:
    linked = inside / "worktrees" / "w"
    linked.mkdir(parents=True)
    (linked / "HEAD").write_text(f"{outside.head()}\n")
    (linked / "commondir").write_text("../..\n")
    (linked / "gitdir").write_text(f"{outside.path / '.git'}\n")
    assert "worktree" in await refused(tmp_path)


async def test_a_linked_worktree_whose_common_directory_is_outside_is_refused(tmp_path: Path, outside: Work) -> None:
    """A working tree under the location made by `git worktree add` from a repository outside it."""
    outside.git("worktree", "add", "--quiet", str(tmp_path / "team" / "api"), "-b", "w")
    await refused(tmp_path)


async def test_a_linked_worktree_entirely_inside_is_read(tmp_path: Path) -> None:
    main = Work(tmp_path / "team" / "main")
    main.git("worktree", "add", "--quiet", str(tmp_path / "team" / "api"), "-b", "w")
    place = await repos_of(tmp_path).open("myorg/api")
    assert place is not None
    assert await gitcli.resolve(place.repo, "w", within=10) == main.head()


async def test_a_config_include_outside_is_refused(tmp_path: Path, inside: Path) -> None:
    extra = tmp_path / "elsewhere.gitconfig"
    extra.write_text("[core]\n\tbare = true\n")
    with (inside / "config").open("a") as config:
        config.write(f'[includeIf "gitdir:/"]\n\tpath = {extra}\n')
    assert "config" in await refused(tmp_path)


async def test_an_objects_directory_symlinked_outside_is_still_refused(
    tmp_path: Path, outside: Work, inside: Path
) -> None:
    shutil.rmtree(inside / "objects")
    (inside / "objects").symlink_to(outside.path / ".git" / "objects")
    await refused(tmp_path)


async def test_a_link_added_after_a_repository_was_read_is_refused_on_the_next_open(
    tmp_path: Path, outside: Work, inside: Path
) -> None:
    """The check of a directory already read is kept only while its entries are unchanged."""
    repos = repos_of(tmp_path)
    assert await repos.open("myorg/api") is not None
    fanout = inside / "objects" / "ff"
    fanout.mkdir(exist_ok=True)
    (fanout / "x").symlink_to(outside.path / "secret.txt")
    with pytest.raises(JctError) as caught:
        await repos.open("myorg/api")
    assert "outside" in caught.value.message, caught.value.message


async def test_a_link_inside_retargeted_outside_through_another_path_is_refused(tmp_path: Path, inside: Path) -> None:
    """A link to another place under the location is resolved again at every open: that place can change."""
    store = tmp_path / "team" / "store"
    store.mkdir()
    (inside / "info").mkdir(exist_ok=True)
    (inside / "info" / "grafts").symlink_to(store / "grafts")
    repos = repos_of(tmp_path)
    assert await repos.open("myorg/api") is not None
    store.rmdir()
    store.symlink_to(tmp_path / "src")
    with pytest.raises(JctError) as caught:
        await repos.open("myorg/api")
    assert "outside" in caught.value.message, caught.value.message
