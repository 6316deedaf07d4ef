"""Event ids claimed 64 sequence numbers a row (``EventIdSet``, ``columns.id_keys``) instead of one
``EventKey`` row per event plus SQLite's ``RecentKeyBatch`` blobs: a batch's claim is one upsert
of ~20 rows (PostgreSQL's per-key B-tree inserts were ~3.3 µs of backend CPU an event, half its
ingest work). The new rows are filled from the ids the stored blocks hold — exactly the ids whose
keys were kept (retention let the others go with their blocks) — one run at a time; going back
rebuilds ``EventKey`` from the blocks the same way.

The key functions are imported from the app: they are part of the stored format (a claim must
compute the keys a migration wrote), so they never change."""

import django.db.models.deletion
import numpy as np
from django.db import migrations, models

_CHUNK = 5_000


def _block_ids(apps, run_id):  # noqa: ANN001, ANN202
    from fabricmon.jobs.columns import block_event_ids  # noqa: PLC0415

    blocks = apps.get_model("jobs", "EventBlock").objects.filter(run_id=run_id).values_list("columns", flat=True)
    for blob in blocks.iterator(chunk_size=64):
        yield block_event_ids(blob)


def _fill_id_sets(apps, schema_editor):  # noqa: ANN001
    from fabricmon.jobs.columns import id_keys  # noqa: PLC0415

    EventIdSet = apps.get_model("jobs", "EventIdSet")  # noqa: N806
    run_ids = apps.get_model("jobs", "EventBlock").objects.values_list("run_id", flat=True).distinct()
    for run_id in sorted(set(run_ids)):
        keys, masks = [], []
        for ids in _block_ids(apps, run_id):
            k, bit = id_keys(ids)
            keys.append(k)
            masks.append(np.left_shift(np.uint64(1), bit.astype(np.uint64)))
        if not keys:
            continue
        k, m = np.concatenate(keys), np.concatenate(masks)
        order = np.argsort(k, kind="stable")
        k, m = k[order], m[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        bits = np.bitwise_or.reduceat(m, starts).view(np.int64)
        rows = [EventIdSet(run_id=run_id, key_hash=key, bits=b, added=b)
                for key, b in zip(k[starts].tolist(), bits.tolist(), strict=True)]
        EventIdSet.objects.bulk_create(rows, batch_size=_CHUNK)


def _fill_event_keys(apps, schema_editor):  # noqa: ANN001
    from fabricmon.jobs.columns import id_hashes  # noqa: PLC0415

    EventKey = apps.get_model("jobs", "EventKey")  # noqa: N806
    run_ids = apps.get_model("jobs", "EventBlock").objects.values_list("run_id", flat=True).distinct()
    for run_id in sorted(set(run_ids)):
        hashes = np.unique(np.concatenate([id_hashes(ids) for ids in _block_ids(apps, run_id)] or [[]]))
        EventKey.objects.bulk_create([EventKey(run_id=run_id, id_hash=h) for h in hashes.astype(np.int64).tolist()],
                                     batch_size=_CHUNK)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0015_eventblock_lz4"),
    ]

    operations = [
        migrations.CreateModel(
            name="EventIdSet",
            fields=[
                ("pk", models.CompositePrimaryKey("run_id", "key_hash", blank=True, editable=False,
                                                  primary_key=True, serialize=False)),
                ("key_hash", models.BigIntegerField()),
                ("bits", models.BigIntegerField()),
                ("added", models.BigIntegerField()),
                ("run", models.ForeignKey(db_constraint=False, db_index=False,
                                          on_delete=django.db.models.deletion.CASCADE, related_name="+",
                                          to="jobs.run")),
            ],
        ),
        migrations.RunPython(_fill_id_sets, _fill_event_keys),
        migrations.RemoveField(model_name="recentkeybatch", name="run"),
        migrations.DeleteModel(name="RecentKeyBatch"),
        migrations.DeleteModel(name="EventKey"),
    ]
