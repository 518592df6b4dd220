"""Profiles (the on-disk description of a target) and the built-in ones."""
from .profile import FORMAT, VERSION, Profile, ProfileError, builtin_names, list_profiles, load_profile

__all__ = ["FORMAT", "VERSION", "Profile", "ProfileError", "builtin_names", "list_profiles", "load_profile"]
