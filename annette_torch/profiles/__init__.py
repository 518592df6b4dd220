"""Profiles (the on-disk description of a target) and the built-in ones."""
from .fingerprint import ProfileMismatchWarning, check_machine
from .profile import FORMAT, VERSION, Profile, ProfileError, builtin_names, list_profiles, load_profile

__all__ = ["FORMAT", "VERSION", "Profile", "ProfileError", "ProfileMismatchWarning", "builtin_names",
           "check_machine", "list_profiles", "load_profile"]
