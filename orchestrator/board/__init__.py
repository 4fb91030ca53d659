"""The public board: an append-only store of results records that many runs merge into, the site built
from it, and its releases (``privauditor board add | check | build | release``)."""
