"""The Jupyter Book: the chapters' data (:mod:`papa.book.load`), their statistics read from the one basis
(:mod:`papa.book.chapter_answers`, :mod:`papa.book.studies`, :mod:`papa.book.probe_checks`), their tables
(:mod:`papa.book.tables`, :mod:`papa.book.interval_tables`, :mod:`papa.book.table_format`), the generated pages
(:mod:`papa.book.pages`) and the build (:mod:`papa.book.build`). Import each name from the module that defines it."""
