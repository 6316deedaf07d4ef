from django.contrib import admin

from fabricmon.alerts.models import (
    Alert,
    AlertTransition,
    AllowedHost,
    Episode,
    Outbox,
    Receiver,
    Rule,
    Silence,
)

admin.site.register(Rule)
admin.site.register(Receiver)
admin.site.register(Silence)
admin.site.register(AllowedHost)
admin.site.register(Episode)
admin.site.register(Alert)
admin.site.register(AlertTransition)
admin.site.register(Outbox)
