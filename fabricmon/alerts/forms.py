from django import forms

from fabricmon.alerts.models import KINDS, Receiver, Rule
from fabricmon.core.detection.config import DetectConfig


class ReceiverForm(forms.ModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https")

    class Meta:
        model = Receiver
        fields = ("name", "kind", "url", "secret", "fabric", "kinds", "send_resolved")
        # a signing secret is never echoed back into the page (not even after a form error)
        widgets = {"secret": forms.PasswordInput(render_value=False)}


class RuleForm(forms.ModelForm):
    class Meta:
        model = Rule
        fields = ("fabric", "kind", "enabled", "for_s", "keep_firing_s", "params")

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
    duration_s = forms.FloatField(min_value=60, initial=3600)
    comment = forms.CharField(max_length=300, required=False)
