import os

from django.core.wsgi import get_wsgi_application

from config.bootstrap import prepare

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
prepare()
application = get_wsgi_application()
