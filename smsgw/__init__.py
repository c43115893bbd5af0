"""The kernel: values, tenancy, the HTTP boundary, the runtime, settings declarations and the domain errors,
which every app may import and which import no app."""
