"""``EventBlockKey``: one row per (block, source, step) with the layers' range and a phase bitmask,
instead of one per (block, source, step, layer, phase) — a batch of 1,000 events wrote 125 index
rows, now 2–3. The rows are rebuilt from the blocks' own columns (both ways), so they are exact
whatever the old rows held."""

import numpy as np
from django.db import migrations, models

_CHUNK = 64


def _block_keys(apps):  # noqa: ANN001, ANN202
    """(run id, block id, source code, step, layer, phase code) of each block's events, per block."""
    from fabricmon.jobs.columns import decode_fields  # noqa: PLC0415

    blocks = apps.get_model("jobs", "EventBlock").objects.order_by("id").values_list("id", "run_id", "columns")
    for block_id, run_id, blob in blocks.iterator(chunk_size=_CHUNK):
        f = decode_fields(blob, ("source", "step", "layer", "phase"))
        yield run_id, block_id, f["source"], f["step"], f["layer"], f["phase"]


def _per_step(apps, schema_editor):  # noqa: ANN001
    from collectors.traces.schema import SOURCES  # noqa: PLC0415

    Key = apps.get_model("jobs", "EventBlockKey")  # noqa: N806
    Key.objects.all().delete()
    rows = []
    for run_id, block_id, source, step, layer, phase in _block_keys(apps):
        for s, st in sorted(set(zip(source.tolist(), step.tolist(), strict=True))):
            sel = (source == s) & (step == st)
            rows.append(Key(run_id=run_id, block_id=block_id, source=SOURCES[s], step=st,
                            layer_min=int(layer[sel].min()), layer_max=int(layer[sel].max()),
                            phases=int(np.bitwise_or.reduce(np.left_shift(1, phase[sel]))),
                            events=int(sel.sum()), layer=-1, phase=""))  # (the last two: dropped next)
        if len(rows) >= 5_000:
            Key.objects.bulk_create(rows)
            rows = []
    Key.objects.bulk_create(rows)


def _per_key(apps, schema_editor):  # noqa: ANN001
    from collectors.traces.schema import PHASES, SOURCES  # noqa: PLC0415

    Key = apps.get_model("jobs", "EventBlockKey")  # noqa: N806
    Key.objects.all().delete()
    rows = []
    for run_id, block_id, source, step, layer, phase in _block_keys(apps):
        packed = np.stack([source, step, layer, phase], axis=1)
        keys, counts = np.unique(packed, axis=0, return_counts=True)
        for (s, st, la, ph), n in zip(keys.tolist(), counts.tolist(), strict=True):
            rows.append(Key(run_id=run_id, block_id=block_id, source=SOURCES[s], step=st, layer=la,
                            phase=PHASES[ph], events=n, layer_min=la, layer_max=la, phases=1 << ph))
        if len(rows) >= 5_000:
            Key.objects.bulk_create(rows)
            rows = []
    Key.objects.bulk_create(rows)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0016_event_id_sets"),
    ]

    operations = [
        migrations.AddField(model_name="eventblockkey", name="layer_min",
                            field=models.IntegerField(default=-1), preserve_default=False),
        migrations.AddField(model_name="eventblockkey", name="layer_max",
                            field=models.IntegerField(default=-1), preserve_default=False),
        migrations.AddField(model_name="eventblockkey", name="phases",
                            field=models.PositiveIntegerField(default=0), preserve_default=False),
        migrations.RunPython(_per_step, _per_key),
        migrations.RemoveIndex(model_name="eventblockkey", name="jobs_eventb_run_id_46fb64_idx"),
        # (defaults only so that going back can add the columns to existing rows: _per_key refills them)
        migrations.AlterField(model_name="eventblockkey", name="layer", field=models.IntegerField(default=-1)),
        migrations.AlterField(model_name="eventblockkey", name="phase",
                              field=models.CharField(default="", max_length=16)),
        migrations.RemoveField(model_name="eventblockkey", name="layer"),
        migrations.RemoveField(model_name="eventblockkey", name="phase"),
        migrations.AddIndex(
            model_name="eventblockkey",
            index=models.Index(fields=["run", "step", "layer_max"], name="jobs_blockkey_step"),
        ),
    ]
