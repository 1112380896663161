"""The Jupyter Book: the chapters' data and tables (``papa.book.<name>`` reaches :mod:`papa.book.data`,
:mod:`papa.book.probe_checks`, :mod:`papa.book.science` and :mod:`papa.book.studies`); the generated pages
(:mod:`papa.book.pages`) and the build (:mod:`papa.book.build`) are imported from their own modules, so a chapter's
run key never covers the site code."""

from papa.book.data import *  # noqa: F403
from papa.book.probe_checks import *  # noqa: F403
from papa.book.science import *  # noqa: F403
from papa.book.studies import *  # noqa: F403
