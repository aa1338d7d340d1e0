from django.urls import include, path

from .support import healthz

urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("healthz", healthz),
]
