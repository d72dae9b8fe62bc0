"""`--dist loadgroup`'s groups, made to hold (loaded by tests/conftest.py).

pytest-xdist 3.8 marks an `xdist_group` test by appending `@group` to `item._nodeid`,
which pytest 9.2 no longer reads (a node's id is the structured `item._id`): every
group was silently split over the workers, so a browser module started a Chromium on
each worker that took one of its tests, and each such worker built a module fixture
(the wheel, a shared project) again. tests/integration/test_xdist_groups.py checks it.
"""

from __future__ import annotations

import pytest


def suffix_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist's workers under `--dist loadgroup`, the `@group` suffix on each grouped
    test's id: the controller schedules by it."""
    if not config.getoption("loadgroup", False):  # xdist sets it on its workers
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if not names or item.nodeid.endswith(suffix):  # none, or xdist's own took
            continue
        if hasattr(item, "_id"):  # pytest >= 9.2
            from _pytest.nodeid import NodeId

            # parse() keeps the whole string as the id (its params part is not reread)
            item._id = NodeId.parse(item.nodeid + suffix)
        else:
            item._nodeid = item.nodeid + suffix
