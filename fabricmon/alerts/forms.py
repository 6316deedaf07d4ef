from django import forms

from fabricmon.alerts.models import KINDS, Receiver, Rule
from fabricmon.core.detection.config import DetectConfig


class ReceiverForm(forms.ModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https", label="URL",
                         help_text="the chat hook, webhook or Alertmanager URL (stored encrypted)")

    class Meta:
        model = Receiver
        fields = ("name", "kind", "url", "secret", "fabric", "kinds", "send_resolved")
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
