"""The Jupyter Book: the chapters' data (:mod:`papa.book.data`), the generated pages
(:mod:`papa.book.pages`) and the build (:mod:`papa.book.build`). ``papa.book.<name>`` reaches all three."""

from papa.book.build import BUILD_DIR, build_book  # noqa: F401
from papa.book.data import *  # noqa: F403
from papa.book.pages import write_pages  # noqa: F401
from papa.book.probe_checks import *  # noqa: F403
from papa.book.science import *  # noqa: F403
from papa.book.studies import *  # noqa: F403
