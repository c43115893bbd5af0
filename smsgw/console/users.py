"""The admin's user pages for people who are not superusers (the `admin` role manages admin users):
nobody can hand out more than they hold.

Django's stock UserAdmin lets anyone with ``auth.change_user`` tick "superuser", add any permission or
put anyone (themselves included) in any group: the `admin` role could make itself superuser. Here, for a
non-superuser:

* "superuser" and direct permissions are read-only (roles are given through groups);
* only groups whose permissions they hold themselves are offered (an `admin` gives `viewer`, `operator`
  or `admin`; a group with more is not listed, and a forged POST naming it is refused by the form);
* a person who outranks them (a superuser, or anyone holding a permission they lack) cannot be changed
  or deleted (the bulk delete asks per user too), nor their password set: that would be taking over
  their account.

"Staff status" stays editable: it only lets a person log in, and gives nothing without a group."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import Group, Permission, User
from django.db.models import Q


def _codes(permissions) -> set[str]:
    return {f"{app}.{code}" for app, code in permissions.values_list("content_type__app_label", "codename")}


def permissions_held(user) -> set[str]:
    """Every permission a user has through their groups or directly, active or not (Django's
    get_all_permissions answers nothing for an inactive user, who could then be reactivated)."""
    return _codes(Permission.objects.filter(Q(group__user=user) | Q(user=user)).distinct())


def outranks(user, other) -> bool:
    """``other`` holds something ``user`` does not."""
    if user.is_superuser:
        return False
    return other.is_superuser or not permissions_held(other) <= permissions_held(user)


def groups_within(user):
    """The groups whose permissions ``user`` holds, all of them."""
    if user.is_superuser:
        return Group.objects.all()
    held = permissions_held(user)
    within = [
        g.pk
        for g in Group.objects.prefetch_related("permissions__content_type")
        if {f"{p.content_type.app_label}.{p.codename}" for p in g.permissions.all()} <= held
    ]
    return Group.objects.filter(pk__in=within)


class BoundedUserAdmin(UserAdmin):
    def get_readonly_fields(self, request, obj=None):
        fields = tuple(super().get_readonly_fields(request, obj))
        if request.user.is_superuser:
            return fields
        return (*fields, "is_superuser", "user_permissions")

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "groups" and not request.user.is_superuser:
            kwargs["queryset"] = groups_within(request.user)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def has_change_permission(self, request, obj=None):
        if obj is not None and outranks(request.user, obj):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and outranks(request.user, obj):
            return False
        return super().has_delete_permission(request, obj)


admin.site.unregister(User)
admin.site.register(User, BoundedUserAdmin)
