"""`fastverifyctl render kubernetes`: a fleet's manifests.

- `options`: `KubeOptions`, every option of the command declared once (the CLI's flags are
  built from it);
- `render`: `render(options) -> Bundle` and `write_bundle(dir, bundle)`;
- `inputs`: the decision record, the configuration and the profile files a render reads;
- `pod`: the pod's layout and the fastverifyd configuration it runs;
- `checks`, `placement`: what a render refuses and what it notes (options, sizes,
  scheduling, network, identity, all-reduce backend);
- `values`, `affinity`: the cluster's scheduling settings (flags or a values file);
- `plan`: what the objects are built from (`Plan`), and `Bundle`, what a render returns (its
  files and plan); `podspec`: the server pod; `manifests`: the other objects and the files;
  `yaml_out`: the files' text.
"""
