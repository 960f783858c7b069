import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
application = get_wsgi_application()

# Load the tokenizers (and the embedding model, with its query path) now, not on the first request or write.
# Before serving, not on a thread: a server that forks after loading this module
# (gunicorn --preload) must not fork while a load holds its lock.
from retrieval.warmup import warm  # noqa: E402  (needs the apps loaded)

warm(queries=True)  # the web process answers searches
