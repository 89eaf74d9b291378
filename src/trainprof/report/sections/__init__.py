"""How each section shows itself: one ``SectionView`` per section (report/sections/view.py), in
a module named after the section, registered in report/sections/registry.py."""
