"""The product's settings, with every Celery key in Redis under a prefix of the test's own, so the
beat and workers of tests/alerts/test_alert_delivery_queue.py share no queue with parallel tests
(their routes, queues and beat schedule stay the product's)."""

import os

from fabricmon.settings import *  # noqa: F403 (a settings module extends the product's settings)

CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": os.environ["FABRICMON_TEST_KEYPREFIX"]}
