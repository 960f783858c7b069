"""The curation dashboard: the pages people click (views, forms, URLs, template tags).

It imports the domain (`facts`, `retrieval`, `memoryadmin`'s models and tasks) and calls
its plain functions; nothing outside this app borrows the dashboard's helpers.
"""
