"""``manage.py create_api_token USER [--name N] [--create-user]``: print a new ingest token once."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from fabricmon.jobs.tokens import issue_token


class Command(BaseCommand):
    help = "Issue an API token for USER (the token is printed once and stored hashed)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("username")
        parser.add_argument("--name", default="")
        parser.add_argument("--create-user", action="store_true", help="create the user if missing")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        users = get_user_model()
        user = users.objects.filter(username=opts["username"]).first()
        if user is None:
            if not opts["create_user"]:
                name = opts["username"]
                raise CommandError(
                    f"no user {name!r}: a new user needs --create-user "
                    f"(manage.py create_api_token {name} --create-user), or create it first"
                )
            user = users.objects.create_user(opts["username"])
        _, token = issue_token(user, opts["name"])
        self.stdout.write(token)
