"""The Jupyter Book: the chapters' data (:mod:`papa.book.load`), one module per chapter that computes every frame
it shows (:mod:`papa.book.chapters`), the studies' and probes' checks (:mod:`papa.book.studies`,
:mod:`papa.book.probe_checks`), the words (:mod:`papa.book.words`), their tables (:mod:`papa.book.tables`,
:mod:`papa.book.interval_tables`, :mod:`papa.book.table_format`), the generated pages (:mod:`papa.book.pages`) and the
build (:mod:`papa.book.build`). Import each name from the module that defines it."""
