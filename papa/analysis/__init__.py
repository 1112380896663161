"""Reading finished runs: tidy result tables, studies and the book's figures."""
