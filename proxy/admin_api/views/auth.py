"""Log-in, its status and log-out (spec §6.2): the shared session store and log-in throttle of
the Django admin (one identity, one limiter for both surfaces)."""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers

from proxy.admin_api.authentication import cross_origin_refusal
from proxy.admin_api.display import china_iso
from proxy.admin_api.envelope import ApiError, BodyCode, ok
from proxy.admin_api.schema import envelope_of
from proxy.admin_api.views.base import PublicAPIView
from proxy.runtime_state.admin_sessions import admin_session_delete
from proxy.services.admin_login import (
    LONGEST_PASSWORD,
    LONGEST_USERNAME,
    LoginOutcome,
    admin_login_attempt,
)
from proxy.sessions import admin_session_login, admin_session_user


class LoginSerializer(serializers.Serializer):
    username = serializers.CharField(
        required=False, allow_blank=True, max_length=LONGEST_USERNAME, trim_whitespace=False
    )
    password = serializers.CharField(max_length=LONGEST_PASSWORD, trim_whitespace=False)


def _set_session_cookie(response, request, token: str, max_age: int) -> None:
    response.set_cookie(
        settings.SESSION_COOKIE_NAME,
        token,
        max_age=max_age,
        path="/",
        secure=settings.SESSION_COOKIE_SECURE or request.is_secure(),
        httponly=True,
        samesite="Lax",
    )


class LoginView(PublicAPIView):
    @extend_schema(
        tags=["auth"],
        summary="Log in (sets the cpr_admin_session cookie)",
        request=LoginSerializer,
        responses={
            200: envelope_of("LoginResult", {"expiresAt": serializers.CharField()}),
            401: OpenApiResponse(description="40102 invalid admin credentials"),
            429: OpenApiResponse(description="42901 too many log-in attempts"),
        },
    )
    def post(self, request):
        body = LoginSerializer(data=self.json_object(request))
        body.is_valid(raise_exception=True)
        now = timezone.now()
        result = admin_login_attempt(
            username=body.validated_data.get("username") or settings.CPR_ADMIN_USERNAME,
            password=body.validated_data["password"],
            client_ip=request.META.get("REMOTE_ADDR"),
            user_agent=request.META.get("HTTP_USER_AGENT"),
            surface="api",
            now=now,
        )
        if result.outcome is LoginOutcome.LOCKED:
            raise ApiError(
                BodyCode.TOO_MANY_LOGIN_ATTEMPTS,
                "Too many failed log-in attempts; try again later",
                headers={"Retry-After": str(result.retry_after_seconds)},
            )
        if result.outcome is LoginOutcome.INVALID:
            raise ApiError(BodyCode.INVALID_CREDENTIALS, "Invalid admin credentials")
        assert result.user is not None  # the log-in succeeded: it names its user
        token, expires_at = admin_session_login(user=result.user, now=now)
        response = ok({"expiresAt": china_iso(expires_at)})
        _set_session_cookie(response, request, token, int((expires_at - now).total_seconds()))
        return response


class AuthStatusView(PublicAPIView):
    @extend_schema(
        tags=["auth"],
        summary="Whether the session cookie is a live admin session (never 401)",
        responses={200: envelope_of("AuthStatus", {"authenticated": serializers.BooleanField()})},
    )
    def get(self, request):
        token = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
        user = admin_session_user(token, now=timezone.now()) if token else None
        return ok({"authenticated": user is not None})


class LogoutView(PublicAPIView):
    @extend_schema(
        tags=["auth"],
        summary="Log out: the session ends, the cookie is cleared",
        request=None,
        responses={
            200: envelope_of("LoggedOut", {"message": serializers.CharField()}),
            403: OpenApiResponse(description="40301 the session cookie came from another site"),
        },
    )
    def post(self, request):
        token = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
        if token:
            # Ending the session is a cookie write like any other: another site must not be
            # able to log the admin out (the browser sends the cookie on its form post).
            refusal = cross_origin_refusal(request)
            if refusal is not None:
                raise refusal
        if token and len(token) <= 256:
            user = admin_session_user(token, now=timezone.now())
            admin_session_delete(token, user_id=user.pk if user else None)
        response = ok({"message": "Logged out successfully"})
        response.delete_cookie(settings.SESSION_COOKIE_NAME, path="/", samesite="Lax")
        return response
