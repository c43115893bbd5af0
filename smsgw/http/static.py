"""Static file storage for production: WhiteNoise's compressed, content-hashed files from
`collectstatic`, and the plain name for a file the manifest does not list.

Django's manifest storage raises for a name missing from staticfiles.json, so a host where
`collectstatic` was not run (or ran for an older release) would answer every admin page with a 500.
Here such a name is linked as is; WhiteNoise (WHITENOISE_USE_FINDERS) serves it from the installed
packages, uncompressed and with a short cache lifetime, until `collectstatic` runs."""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


class ForgivingManifestStorage(CompressedManifestStaticFilesStorage):
    manifest_strict = False

    def stored_name(self, name: str) -> str:
        try:
            return super().stored_name(name)
        except ValueError:  # not in the manifest, and no collected copy to hash either
            return name
