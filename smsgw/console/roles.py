"""The operator roles, as groups: `viewer` sees everything but secrets and acts on nothing; `operator`
also acts on messages, schedules, campaigns, holds (provider and review holds), circuits, webhook
deliveries, sender rates and routing rules; `admin` also manages tenants, their senders, API keys,
periodic tasks, admin users and login lockouts. A person gets a role by being `is_staff` and in one
group (docs/admin.md, "Who may do what"). Nobody but a superuser deletes messages or their history: no
role has those permissions, and the admin refuses them to everyone anyway.

Created by smsgw/migrations/0004_operator_roles; ``roles_sync`` resets the groups to these permissions
(also after a test database was flushed)."""

ROLES = ("viewer", "operator", "admin")

VIEW = {
    "scheduling": [
        "message",
        "messageevent",
        "schedule",
        "scheduleversion",
        "campaign",
        "campaignerror",
        "operatorjob",  # bulk actions over a filter, their progress and outcome (read-only)
    ],
    "delivery": [
        "attempt",
        "providerhold",
        "duplicatesubmission",
        "optoutsignal",
        "suppression",
        "suppressionchange",
        "sendercapacity",
        "accountcapacity",
        "ratebucket",
        "providercircuit",
        "providerhostcircuit",
        "reviewhold",
        "routerule",
        "routeleg",
    ],
    "receipts": ["receiptevent", "webhookdelivery", "statuslookup"],
    "limits": ["quotawindow", "apiratebucket"],
    "smsgw": ["tenant", "tenantsender"],
    # Inbound (docs/inbound.md, "Operators"): read-only for every role; nobody edits a received message.
    "inbound": ["inboundmessage", "unroutedinbound", "inboundpart", "keywordrule"],
    # The queues' consumers (the console's "Queues without a consumer"): read-only for every role.
    "observability": ["queueconsumer", "unconsumedqueue"],
    "django_celery_beat": [
        "periodictask",
        "intervalschedule",
        "crontabschedule",
        "solarschedule",
        "clockedschedule",
    ],
}
# "change" on these is what the admin actions require (cancel, reschedule, replay, pause, clear, ...);
# their fields stay read-only.
OPERATE = {
    "scheduling": {"message": ["change"], "schedule": ["change"], "campaign": ["change"]},
    "delivery": {
        "providerhold": ["change"],
        "suppression": ["add", "delete"],
        "providercircuit": ["change"],
        "providerhostcircuit": ["change"],
        "reviewhold": ["change"],  # release / cancel a velocity review hold
        "sendercapacity": ["add", "change"],
        "accountcapacity": ["add", "change"],
        # Routing rules and their legs (delivery.routing): edited in the admin, audited there.
        "routerule": ["add", "change", "delete"],
        "routeleg": ["add", "change", "delete"],
    },
    "receipts": {"webhookdelivery": ["change"]},
}
MANAGE = {
    # Who opened which message's page (scheduling.operator_jobs.audit): the admin role reads it.
    "scheduling": {"messageview": ["view"]},
    "smsgw": {
        "tenant": ["add", "change"],
        "apikey": ["view", "add", "change"],
        # Which tenant may send from which sender (smsgw.tenancy.senders): delete is a release.
        "tenantsender": ["add", "change", "delete"],
    },
    # A tenant's keywords and what they do (inbound.keywords), on the tenant's page: as the tenant's own
    # settings, the admin role's.
    "inbound": {"keywordrule": ["add", "change", "delete"]},
    "django_celery_beat": {
        model: ["add", "change", "delete"]
        for model in (
            "periodictask",
            "intervalschedule",
            "crontabschedule",
            "solarschedule",
            "clockedschedule",
        )
    },
    "auth": {"user": ["view", "add", "change", "delete"], "group": ["view"]},
    "axes": {"accessattempt": ["view", "delete"], "accessfailurelog": ["view"], "accesslog": ["view"]},
}


def _codes(spec):
    for app, models in spec.items():
        for model, verbs in models.items():
            for verb in verbs:
                yield app, f"{verb}_{model}"


def _model_exists(apps, app: str, codename: str) -> bool:
    try:
        apps.get_model(app, codename.split("_", 1)[1])
    except LookupError:
        return False
    return True


def roles_sync(apps, *, allow_missing: bool = False) -> None:
    """Create or reset the three groups (``apps``: a migration's historical registry, or the live one).
    ``allow_missing``: an early migration, before later models (and their permissions) exist; a later
    migration syncs again (smsgw 0005)."""
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after all migrations ran (post_migrate); make them now.
    # (create_permissions skips an app whose models_module is unset, as it is in a migration's registry.)
    for app_config in apps.get_app_configs():
        previous = getattr(app_config, "models_module", None)
        app_config.models_module = previous or True
        try:
            create_permissions(app_config, apps=apps, verbosity=0)
        finally:
            app_config.models_module = previous
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")

    def perms(pairs):
        pairs = set(pairs)
        found = [
            p
            for p in Permission.objects.select_related("content_type")
            if (p.content_type.app_label, p.codename) in pairs
        ]
        missing = pairs - {(p.content_type.app_label, p.codename) for p in found}
        # A model a later migration creates (its permissions cannot exist yet) gets its rights there,
        # when that migration syncs the roles again (e.g. smsgw 0007 for delivery's review holds).
        missing = {(app, code) for app, code in missing if _model_exists(apps, app, code)}
        if missing and not allow_missing:
            raise RuntimeError(f"permissions not found: {sorted(missing)}")
        return found

    viewer = [(app, f"view_{model}") for app, models in VIEW.items() for model in models]
    operator = viewer + list(_codes(OPERATE))
    admin = operator + list(_codes(MANAGE))
    for name, pairs in zip(ROLES, (viewer, operator, admin), strict=True):
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(perms(pairs))
