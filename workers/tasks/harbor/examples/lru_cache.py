"""Shipped task ``lru-cache``: a Python cache that evicts the oldest insertion, not the least recently used key
(a read or an update does not count as a use)."""

from __future__ import annotations

from workers.tasks.harbor.examples.python_task import Case, python_task

README = """# lru

A least-recently-used cache of a fixed capacity.
"""
BUGGY = '''"""A least-recently-used cache: past its capacity, the key used longest ago goes."""


class LRUCache:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._data = {}

    def get(self, key, default=None):
        """The value of ``key`` (a use of it), else ``default``."""
        return self._data.get(key, default)

    def put(self, key, value):
        """Store ``value`` under ``key`` (a use of it); past the capacity, evict the least recently used key."""
        self._data[key] = value
        if len(self._data) > self.capacity:
            del self._data[next(iter(self._data))]

    def __len__(self):
        return len(self._data)
'''
FIXED = '''"""A least-recently-used cache: past its capacity, the key used longest ago goes."""

from collections import OrderedDict


class LRUCache:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._data = OrderedDict()

    def get(self, key, default=None):
        """The value of ``key`` (a use of it), else ``default``."""
        if key not in self._data:
            return default
        self._data.move_to_end(key)
        return self._data[key]

    def put(self, key, value):
        """Store ``value`` under ``key`` (a use of it); past the capacity, evict the least recently used key."""
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def __len__(self):
        return len(self._data)
'''
INSTRUCTION = """`lru.py` in /app is a least-recently-used cache (`LRUCache(capacity)`, `get(key, default=None)`,
`put(key, value)`), but it evicts the wrong keys. Both `get` of a present key and `put` (new or existing key)
count as a use of that key; when a `put` takes the cache past its capacity, the key used longest ago must go.

Fix `lru.py`; keep the class's name and methods.
"""
_HEAD = "from lru import LRUCache\n"
CASES = [
    Case(
        "get-is-a-use",
        _HEAD + "c = LRUCache(2)\nc.put('a', 1)\nc.put('b', 2)\nc.get('a')\nc.put('c', 3)\n"
        "print([c.get('a'), c.get('b'), c.get('c')])",
        "[1, None, 3]",
    ),
    Case(
        "update-is-a-use",
        _HEAD + "c = LRUCache(2)\nc.put('a', 1)\nc.put('b', 2)\nc.put('a', 10)\nc.put('c', 3)\n"
        "print([c.get('a'), c.get('b'), c.get('c')])",
        "[10, None, 3]",
    ),
    Case(
        "reads-reorder",
        _HEAD + "c = LRUCache(3)\nfor i, k in enumerate('xyz'):\n    c.put(k, i + 1)\n"
        "c.get('x')\nc.get('y')\nc.put('w', 4)\nprint([c.get(k) for k in 'xyzw'])",
        "[1, 2, None, 4]",
    ),
    Case(
        "many-reads",
        _HEAD + "c = LRUCache(2)\nc.put('a', 1)\nc.put('b', 2)\nc.get('a')\nc.get('b')\nc.get('a')\n"
        "c.put('c', 3)\nprint([c.get('a'), c.get('b'), c.get('c'), len(c)])",
        "[1, None, 3, 2]",
    ),
]
SPEC = python_task(
    name="lru-cache",
    instruction=INSTRUCTION,
    base={"README.md": README},
    buggy={"lru.py": BUGGY},
    fixed={"lru.py": FIXED},
    cases=CASES,
    fix_branch="fix/lru-order",
    fix_tag="v1.1.1",
    bug_message="Add the LRU cache",
    fix_message="Count get and update as uses: evict the least recently used key",
)
