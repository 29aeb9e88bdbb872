"""MkDocs hooks: the README and the CHANGELOG as pages of the site, with links that resolve there.

The repository's Markdown links point at files (`docs/devices.md` from the README,
`../README.md` from a page of docs/); the site holds the pages of docs/ at its top level and the
two root files as `readme.md` and `changelog.md`. A relative link is resolved against the file
it is written in, then rewritten to the page that file becomes in the site; a link to anything
else is left as written, so MkDocs' strict link check reports it.
"""

from __future__ import annotations

import os
import posixpath
import re

from mkdocs.structure.files import File

ROOT_PAGES = {"README.md": "readme.md", "CHANGELOG.md": "changelog.md"}
LINK = re.compile(r"(\]\()([^)\s]+)(\))")
EXTERNAL = re.compile(r"^([a-z][a-z0-9+.-]*:|#|/)", re.IGNORECASE)


def on_files(files, config):
    """Adds the repository's root pages to the site."""
    root = os.path.dirname(config["config_file_path"])
    for source, page in ROOT_PAGES.items():
        files.append(File.generated(config, page, abs_src_path=os.path.join(root, source)))
    return files


def repository_path(page_uri: str) -> str:
    """Where the Markdown of a site page lives in the repository."""
    for source, page in ROOT_PAGES.items():
        if page_uri == page:
            return source
    return "docs/" + page_uri


def site_path(repo_path: str) -> str | None:
    """The site page a repository file becomes, or None when it is not part of the site."""
    if repo_path in ROOT_PAGES:
        return ROOT_PAGES[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/"):]
    return None


def rewrite_link(target: str, page_uri: str) -> str:
    """A link written in the page's repository file, as a link between site pages."""
    if EXTERNAL.match(target):
        return target
    path, hash_, anchor = target.partition("#")
    source_dir = posixpath.dirname(repository_path(page_uri))
    page = site_path(posixpath.normpath(posixpath.join(source_dir, path)))
    if page is None:
        return target
    return posixpath.relpath(page, posixpath.dirname(page_uri) or ".") + hash_ + anchor


def on_page_markdown(markdown, page, config, files):
    """Rewrites the page's relative links before MkDocs resolves and checks them."""
    uri = page.file.src_uri
    return LINK.sub(lambda m: m.group(1) + rewrite_link(m.group(2), uri) + m.group(3), markdown)
