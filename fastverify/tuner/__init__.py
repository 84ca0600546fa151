"""fastverify's NCCL tuner plugin support: the table format, the built plugin, the
derivation's helpers and the check that NCCL loaded it.

The profile layer uses the tuner (a tuner profile names a table: `fastverify.profiles.tuner`,
its doctor findings `fastverify.profiles.doctor_tuner`); the tuner never imports the profile
layer (`Problem` comes from `fastverify.problems`)."""
