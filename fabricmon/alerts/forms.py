from typing import Any

from django import forms

from fabricmon.alerts import timing
from fabricmon.alerts.models import KINDS, Receiver, Rule
from fabricmon.core.detection.config import DetectConfig


class DurationField(forms.CharField):
    """An Alertmanager duration (``30s``, ``5m``, ``4h``, ``1h30m``, ``0``) as seconds, empty = the
    default; the model's validators then say whether the value is allowed for this setting."""

    def __init__(self, *, default_s: float, **kwargs: Any) -> None:
        self.default_s = default_s
        super().__init__(required=False, initial=timing.format_duration(default_s), **kwargs)

    def to_python(self, value: Any) -> float:  # type: ignore[override]
        if isinstance(value, int | float):
            return float(value)
        text = super().to_python(value)
        if not text:
            return self.default_s
        try:
            return timing.parse_duration(text)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def prepare_value(self, value: Any) -> Any:
        return timing.format_duration(value) if isinstance(value, int | float) else value


class LabelListField(forms.CharField):
    """Label names, comma-separated (``fabric, alertname``; ``...`` = every label; empty = one
    group for every alert)."""

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        if isinstance(value, list | tuple):
            names = [str(v) for v in value]
        else:
            names = (super().to_python(value) or "").split(",")
        try:
            return list(timing.clean_group_by(names))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list | tuple) else value


ROUTE_FIELDS = ("group_by", "group_wait_s", "group_interval_s", "repeat_interval_s")


def route_fields() -> tuple[forms.Field, ...]:
    """Alertmanager's route settings, as a receiver's form shows them (docs/alerts.md)."""
    return (
        LabelListField(label="group_by", required=False, initial=", ".join(timing.DEFAULT_GROUP_BY),
                       help_text="labels whose values make a group: alertname, fabric, scope, run "
                                 "(comma-separated; ... = every label; empty = one group)"),
        DurationField(label="group_wait", default_s=timing.DEFAULT_GROUP_WAIT_S,
                      help_text="a new group's first notification waits this long for more alerts "
                                "(0 or more)"),
        DurationField(label="group_interval", default_s=timing.DEFAULT_GROUP_INTERVAL_S,
                      help_text="a group's changes are sent at most this often (more than 0)"),
        DurationField(label="repeat_interval", default_s=timing.DEFAULT_REPEAT_INTERVAL_S,
                      help_text="an unchanged firing group is sent again after this long (more than 0)"),
    )


class ReceiverForm(forms.ModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https", label="URL",
                         help_text="the chat hook, webhook or Alertmanager URL (stored encrypted)")
    group_by, group_wait_s, group_interval_s, repeat_interval_s = route_fields()

    class Meta:
        model = Receiver
        fields = ("name", "kind", "url", "secret", "fabric", "kinds", "send_resolved", *ROUTE_FIELDS)
        # a signing secret is never echoed back into the page (not even after a form error)
        widgets = {
            "secret": forms.PasswordInput(render_value=False),
            "kinds": forms.Textarea(attrs={"rows": 2}),
        }
        labels = {"kinds": "Alert kinds", "send_resolved": "Also send when resolved"}


class RuleForm(forms.ModelForm):
    class Meta:
        model = Rule
        fields = ("fabric", "kind", "enabled", "for_s", "keep_firing_s", "params")
        labels = {"for_s": "For (s)", "keep_firing_s": "Keep firing (s)", "params": "Detection parameters"}
        widgets = {"params": forms.Textarea(attrs={"rows": 3})}

    def clean_params(self) -> dict:
        params = self.cleaned_data.get("params") or {}
        try:
            DetectConfig.from_mapping(params)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return params


class SilenceForm(forms.Form):
    fabric = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=[("", "any kind"), *KINDS], required=False)
    key_contains = forms.CharField(max_length=200, required=False)
    duration_s = forms.FloatField(min_value=60, initial=3600, label="Duration (s)")
    comment = forms.CharField(max_length=300, required=False)
