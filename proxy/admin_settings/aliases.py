"""Model aliases edited as rows (alias → model), stored as before in
``runtime_settings.model_aliases_json``.

A formset of two text fields a row: rows left blank are ignored, a row ticked "Delete" is
dropped, and what remains must pass the same check as the admin API's ``modelAliases``
(``proxy.models_catalog.checked_aliases``). Every refusal names its row, so the operator sees
which one to fix.
"""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.forms.formsets import BaseFormSet, formset_factory

from proxy.models_catalog import (
    BUILTIN_MODEL_IDS,
    LONGEST_MODEL_NAME,
    MOST_ALIASES,
    InvalidAliases,
    catalog_from_snapshots,
    checked_aliases,
)

ALIAS_PREFIX = "alias"
TARGETS_LIST_ID = "alias-targets"
# Blank rows under the stored ones (the page's "Add another alias" adds more in a browser).
BLANK_ROWS = 3


class AliasRowForm(forms.Form):
    alias = forms.CharField(
        required=False,
        max_length=LONGEST_MODEL_NAME,
        label="Alias",
        widget=forms.TextInput(attrs={"size": 30}),
    )
    target = forms.CharField(
        required=False,
        max_length=LONGEST_MODEL_NAME,
        label="Model",
        widget=forms.TextInput(attrs={"size": 30, "list": TARGETS_LIST_ID}),
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if "alias" not in cleaned or "target" not in cleaned:
            return cleaned  # a field is already refused (too long)
        alias, target = cleaned["alias"], cleaned["target"]
        if alias and not target:
            self.add_error("target", "Give the model this alias stands for.")
        elif target and not alias:
            self.add_error("alias", "Give this model an alias, or clear the row.")
        elif alias and alias == target:
            self.add_error("target", "An alias cannot be its own model: it would rename nothing.")
        return cleaned

    @property
    def is_blank(self) -> bool:
        cleaned = getattr(self, "cleaned_data", {})
        return not cleaned.get("alias") and not cleaned.get("target")


class BaseAliasRowFormSet(BaseFormSet):
    """The rows; ``aliases`` is the map to store once ``is_valid()`` said yes."""

    aliases: dict[str, str]

    def clean(self) -> None:
        self.aliases = {}
        if any(self.errors):
            return
        rows: dict[str, int] = {}
        for number, form in enumerate(self.forms, start=1):
            if form.cleaned_data.get("DELETE") or form.is_blank:
                continue
            alias = form.cleaned_data["alias"]
            if alias in rows:
                form.add_error("alias", f"{alias!r} is already the alias of row {rows[alias]}.")
                continue
            rows[alias] = number
            self.aliases[alias] = form.cleaned_data["target"]
        if any(self.errors):
            return
        if len(self.aliases) > MOST_ALIASES:
            raise forms.ValidationError(f"At most {MOST_ALIASES} aliases.")
        try:
            # The admin API's rule, so the two surfaces cannot drift apart.
            self.aliases = checked_aliases(self.aliases)
        except InvalidAliases as error:
            raise forms.ValidationError(str(error)) from None


AliasRowFormSet = formset_factory(
    AliasRowForm,
    formset=BaseAliasRowFormSet,
    extra=BLANK_ROWS,
    can_delete=True,
    can_delete_extra=False,
    max_num=MOST_ALIASES + BLANK_ROWS,
    absolute_max=MOST_ALIASES + BLANK_ROWS,
)


def alias_rows(*, stored: Any, data: Any = None) -> BaseAliasRowFormSet:
    """The rows of ``stored`` (the column's map, sorted by alias), bound to ``data`` when the
    page was posted."""
    initial = [
        {"alias": alias, "target": target}
        for alias, target in sorted((stored or {}).items())
        if isinstance(alias, str) and isinstance(target, str)
    ]
    return cast(
        BaseAliasRowFormSet, AliasRowFormSet(data=data, prefix=ALIAS_PREFIX, initial=initial)
    )


def alias_target_suggestions(snapshots: dict[str, dict[str, Any]]) -> list[str]:
    """Model ids to suggest as targets: the plan snapshots' models, else the built-in list."""
    return sorted(catalog_from_snapshots(snapshots).ids or BUILTIN_MODEL_IDS)
