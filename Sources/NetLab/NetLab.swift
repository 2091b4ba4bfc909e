/// Network-namespace test lab (see NetLab.swift when written).
public enum NetLabPlaceholder {}
